"""The figures larder reports agree with what happened, where a cluster or a
log that gathers several nodes could make them disagree.

- Request ids: the id of the access log and of x-larder-request-id tells one
  request from every other, also across the nodes of a cluster whose logs an
  operator reads together (two nodes serving their first request in the same
  second once gave both the same id).
"""
import time
import unittest

import harness


def one_id(node):
    """The request id of one unsigned request (refused before anything upstream)."""
    status, hdrs, _ = harness.http_request(node.url, "GET", "/")
    return hdrs.get("x-larder-request-id")


class RequestIdsAcrossProcesses(unittest.TestCase):

    def test_two_nodes_never_hand_out_the_same_id(self):
        env = {"LARDER_WORKERS": "1", "AWS_ACCESS_KEY_ID": "a", "AWS_SECRET_ACCESS_KEY": "b",
               "LARDER_UPSTREAM_URL": "http://127.0.0.1:9"}
        nodes = [harness.Larder(env=env) for _ in range(2)]
        try:
            for n in nodes:
                n.start()
            # Both nodes' n-th request within one second: the case that collided.
            while time.time() % 1 > 0.5:
                time.sleep(0.05)
            pairs = [(one_id(nodes[0]), one_id(nodes[1])) for _ in range(3)]
            for a, b in pairs:
                self.assertTrue(a and b, pairs)
                self.assertNotEqual(a, b, "two nodes gave the same request id: %r" % pairs)
        finally:
            for n in nodes:
                n.stop()
                n.cleanup()



if __name__ == "__main__":
    unittest.main()
