/*
 * httpdate.h - HTTP dates, RFC 9110 section 5.6.7: the IMF-fixdate form
 * "Sun, 06 Nov 1994 08:49:37 GMT" (Date, Last-Modified, If-Modified-Since,
 * Expires ...).
 *
 * What the parser accepts (the grammar the signature checks have always
 * enforced, now shared by every caller):
 *  - surrounding whitespace;
 *  - a day name of any three characters before ", " (not checked against
 *    the date);
 *  - a one- or two-digit day, a month name as in the example (case
 *    matters), a four-digit year from 1970, two-digit hour, minute and
 *    second (60 allowed: a leap second counts as the next minute's first);
 *  - only dates that exist (no 31 February, no 29 February of a common year).
 * The obsolete RFC 850 and asctime forms are refused by httpdate_parse
 * (a signature's date is never in them) and taken by httpdate_parse_any,
 * for the conditional headers of a read. Failure is always -EINVAL with
 * *out untouched, so a caller that has a value for "absent or unreadable"
 * presets it.
 */
#ifndef LARDER_HTTPDATE_H
#define LARDER_HTTPDATE_H

#include <time.h>

/* "Sun, 06 Nov 1994 08:49:37 GMT" and its NUL. */
#define HTTPDATE_SIZE 30

/* Writes t (UTC) as an IMF-fixdate, always in English; t before 1970 or
 * after 9999 is clamped to the nearest date the form can write. */
void httpdate_format(time_t t, char out[HTTPDATE_SIZE]);

/* The current time as httpdate_format writes it (a response's Date),
 * formatted once a second per thread. */
void httpdate_now(char out[HTTPDATE_SIZE]);

/* Parses an IMF-fixdate whose zone is "GMT". s may be NULL (-EINVAL).
 * Returns 0 with *out set, or -EINVAL. */
int httpdate_parse(const char *s, time_t *out);

/* Any of the three forms a recipient must accept (RFC 9110 5.6.7): the
 * IMF-fixdate as httpdate_parse takes it, RFC 850's
 * "Sunday, 06-Nov-94 08:49:37 GMT" (any day name; the two-digit year is
 * the last one ending so that is at most 50 years after now's) and
 * asctime's "Sun Nov  6 08:49:37 1994" (the day of the month two digits,
 * or a space or none and one digit). now: the wall clock (time(NULL)). */
int httpdate_parse_any(const char *s, time_t now, time_t *out);

/* httpdate_parse, also taking the zones RFC 5322 section 3.3 allows and
 * S3's SigV2 examples use: "UTC", "Z", or a numeric "+hhmm" / "-hhmm"
 * (the result is UTC). */
int httpdate_parse_zoned(const char *s, time_t *out);

/* The time of a UTC date and time of day, by arithmetic: timegm takes
 * glibc's time-zone lock and normalises impossible dates (31 February
 * becomes 3 March), and SigV4 checks two dates per request. Years
 * 1970-9999; 60 seconds is a leap second, the next minute's first, but
 * not at 23:59 (the next day's first, which callers have always refused).
 * Returns 0 with *out set, or -EINVAL (*out untouched) for a date or time
 * that does not exist. */
int utc_time(int y, int mon, int d, int h, int mi, int s, time_t *out);

#endif
