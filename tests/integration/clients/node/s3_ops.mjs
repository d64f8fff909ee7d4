// Drives an S3 endpoint (larder) with the AWS SDK for JavaScript v3, as an
// application would, and checks what comes back.
//
//   S3_ENDPOINT=http://127.0.0.1:PORT S3_BUCKET=NAME \
//   AWS_ACCESS_KEY_ID=... AWS_SECRET_ACCESS_KEY=... node s3_ops.mjs
//
// Optional: S3_PREFIX (key prefix, default "js/"), S3_CHECKSUM ("when_supported",
// the SDK's default, or "when_required": sets both requestChecksumCalculation and
// responseChecksumValidation). The bucket must exist.
//
// Prints one JSON line {"ok": bool, "checksum": ..., "ops": {name: "ok" | error},
// "wire": {"METHOD payload-mode[ trailer=...][ header=...]": count}}
// and exits 1 when any operation failed or returned something unexpected.
import { createHash, randomBytes } from "node:crypto";
import { Readable } from "node:stream";
import {
  S3Client,
  PutObjectCommand,
  GetObjectCommand,
  HeadObjectCommand,
  ListObjectsV2Command,
  DeleteObjectCommand,
  CreateMultipartUploadCommand,
  UploadPartCommand,
  CompleteMultipartUploadCommand,
} from "@aws-sdk/client-s3";
import { NodeHttpHandler } from "@smithy/node-http-handler";

const MiB = 1024 * 1024;
const env = process.env;
const endpoint = env.S3_ENDPOINT;
const bucket = env.S3_BUCKET;
const prefix = env.S3_PREFIX || "js/";
const checksum = (env.S3_CHECKSUM || "when_supported").toUpperCase();
if (!endpoint || !bucket || !env.AWS_ACCESS_KEY_ID || !env.AWS_SECRET_ACCESS_KEY) {
  console.error("need S3_ENDPOINT, S3_BUCKET, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY");
  process.exit(2);
}

// Every request as it goes on the wire: its payload mode (x-amz-content-sha256),
// trailer and x-amz-checksum-* headers, counted in the output so a caller can see what was exercised.
const wire = new NodeHttpHandler();
const modes = {};
const requestHandler = {
  handle(req, opts) {
    const h = Object.fromEntries(Object.entries(req.headers).map(([k, v]) => [k.toLowerCase(), v]));
    let mode = h["x-amz-content-sha256"] || "(none)";
    if (/^[0-9a-f]{64}$/.test(mode)) mode = "signed";
    if (h["x-amz-trailer"]) mode += " trailer=" + h["x-amz-trailer"];
    const cks = Object.keys(h).filter((k) => k.startsWith("x-amz-checksum-") && k !== "x-amz-checksum-mode");
    if (cks.length) mode += " header=" + cks.sort().join(",");
    const name = `${req.method} ${mode}`;
    modes[name] = (modes[name] || 0) + 1;
    return wire.handle(req, opts);
  },
  updateHttpClientConfig: (k, v) => wire.updateHttpClientConfig(k, v),
  httpHandlerConfigs: () => wire.httpHandlerConfigs(),
  destroy: () => wire.destroy(),
};

const s3 = new S3Client({
  requestHandler,
  endpoint,
  forcePathStyle: true,
  region: "us-east-1",
  credentials: {
    accessKeyId: env.AWS_ACCESS_KEY_ID,
    secretAccessKey: env.AWS_SECRET_ACCESS_KEY,
  },
  maxAttempts: 1,
  requestChecksumCalculation: checksum,
  responseChecksumValidation: checksum,
});

let lib_storage = null;
try {
  lib_storage = await import("@aws-sdk/lib-storage");
} catch {
  lib_storage = null;
}

const ops = {};
const sha = (b) => createHash("sha256").update(b).digest("hex");

function check(cond, what) {
  if (!cond) throw new Error("unexpected result: " + what);
}

async function op(name, fn) {
  try {
    await fn();
    ops[name] = "ok";
  } catch (e) {
    const status = e?.$metadata?.httpStatusCode;
    ops[name] = `${e?.name || "Error"}${status ? " (HTTP " + status + ")" : ""}: ${e?.message || e}`;
  }
}

async function bodyBytes(resp) {
  return Buffer.from(await resp.Body.transformToByteArray());
}

const smallKey = prefix + "small.txt";
const smallBody = "hello from the AWS SDK for JavaScript v3\n".repeat(3);
const bigKey = prefix + "big.bin";
const big = randomBytes(6 * MiB + 123);
const streamKey = prefix + "stream.bin";
const streamBody = randomBytes(300 * 1024 + 5);
const mpuKey = prefix + "multipart.bin";
const mpuBody = randomBytes(12 * MiB + 77);

await op("put_small", async () => {
  const r = await s3.send(new PutObjectCommand({
    Bucket: bucket, Key: smallKey, Body: smallBody, ContentType: "text/plain",
  }));
  check(r.ETag === `"${createHash("md5").update(smallBody).digest("hex")}"`, "ETag " + r.ETag);
});

await op("put_big", async () => {
  const r = await s3.send(new PutObjectCommand({ Bucket: bucket, Key: bigKey, Body: big }));
  check(r.ETag === `"${createHash("md5").update(big).digest("hex")}"`, "ETag " + r.ETag);
});

// A stream body of known length: with checksums on, the SDK sends it aws-chunked
// (STREAMING-UNSIGNED-PAYLOAD-TRAILER) with a trailing x-amz-checksum-crc32.
await op("put_stream", async () => {
  await s3.send(new PutObjectCommand({
    Bucket: bucket, Key: streamKey, Body: Readable.from([streamBody.subarray(0, 100000),
      streamBody.subarray(100000)]), ContentLength: streamBody.length,
  }));
  const got = await bodyBytes(await s3.send(new GetObjectCommand({ Bucket: bucket, Key: streamKey })));
  check(sha(got) === sha(streamBody), "stream object read back differs");
});

await op("get_small", async () => {
  const r = await s3.send(new GetObjectCommand({ Bucket: bucket, Key: smallKey }));
  const got = await r.Body.transformToString();
  check(got === smallBody, "small body differs");
  check(r.ContentType === "text/plain", "ContentType " + r.ContentType);
});

await op("get_big", async () => {
  for (let i = 0; i < 2; i++) { // second read: from larder's cache
    const got = await bodyBytes(await s3.send(new GetObjectCommand({ Bucket: bucket, Key: bigKey })));
    check(got.length === big.length && sha(got) === sha(big), `big body differs (read ${i + 1})`);
  }
});

await op("get_range", async () => {
  const r = await s3.send(new GetObjectCommand({ Bucket: bucket, Key: bigKey, Range: "bytes=100-1099" }));
  const got = await bodyBytes(r);
  check(r.$metadata.httpStatusCode === 206, "status " + r.$metadata.httpStatusCode);
  check(r.ContentRange === `bytes 100-1099/${big.length}`, "ContentRange " + r.ContentRange);
  check(got.equals(big.subarray(100, 1100)), "range bytes differ");
  const tail = await bodyBytes(await s3.send(new GetObjectCommand({
    Bucket: bucket, Key: bigKey, Range: `bytes=${4 * MiB}-`,
  })));
  check(tail.equals(big.subarray(4 * MiB)), "open-ended range bytes differ");
});

await op("head", async () => {
  const r = await s3.send(new HeadObjectCommand({ Bucket: bucket, Key: bigKey }));
  check(r.ContentLength === big.length, "ContentLength " + r.ContentLength);
  check(r.ETag === `"${createHash("md5").update(big).digest("hex")}"`, "ETag " + r.ETag);
});

await op("multipart", async () => {
  let etag;
  if (lib_storage) {
    const up = new lib_storage.Upload({
      client: s3, params: { Bucket: bucket, Key: mpuKey, Body: mpuBody },
      partSize: 5 * MiB, queueSize: 2, leavePartsOnError: false,
    });
    etag = (await up.done()).ETag;
  } else {
    const { UploadId } = await s3.send(new CreateMultipartUploadCommand({ Bucket: bucket, Key: mpuKey }));
    const parts = [];
    for (let n = 1, off = 0; off < mpuBody.length; n++, off += 5 * MiB) {
      const r = await s3.send(new UploadPartCommand({
        Bucket: bucket, Key: mpuKey, UploadId, PartNumber: n,
        Body: mpuBody.subarray(off, off + 5 * MiB),
      }));
      parts.push({ PartNumber: n, ETag: r.ETag });
    }
    etag = (await s3.send(new CompleteMultipartUploadCommand({
      Bucket: bucket, Key: mpuKey, UploadId, MultipartUpload: { Parts: parts },
    }))).ETag;
  }
  check(/-3"$/.test(etag || ""), "multipart ETag " + etag);
  const got = await bodyBytes(await s3.send(new GetObjectCommand({ Bucket: bucket, Key: mpuKey })));
  check(sha(got) === sha(mpuBody), "multipart object read back differs");
});

await op("list", async () => {
  const r = await s3.send(new ListObjectsV2Command({ Bucket: bucket, Prefix: prefix }));
  const keys = (r.Contents || []).map((o) => o.Key).sort();
  const want = [bigKey, mpuKey, smallKey, streamKey].sort();
  check(JSON.stringify(keys) === JSON.stringify(want), "keys " + JSON.stringify(keys));
  const size = Object.fromEntries((r.Contents || []).map((o) => [o.Key, o.Size]));
  check(size[bigKey] === big.length, "listed size " + size[bigKey]);
});

await op("delete", async () => {
  await s3.send(new DeleteObjectCommand({ Bucket: bucket, Key: smallKey }));
  try {
    await s3.send(new HeadObjectCommand({ Bucket: bucket, Key: smallKey }));
  } catch (e) {
    check(e?.$metadata?.httpStatusCode === 404, "HEAD after delete: " + e?.name);
    return;
  }
  throw new Error("object still there after DeleteObject");
});

const ok = Object.values(ops).every((v) => v === "ok");
console.log(JSON.stringify({
  ok, checksum, lib_storage: !!lib_storage, ops, wire: modes,
}));
process.exit(ok ? 0 : 1);
