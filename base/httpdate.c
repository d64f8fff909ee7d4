/*
 * httpdate.c - HTTP-date parsing (the IMF-fixdate, and for the conditional
 * headers the two obsolete forms) and formatting (rules in base/httpdate.h).
 *
 * Hand-written rather than strptime/strftime: those follow the locale, are
 * lenient in ways a signature check must not be (trailing junk, 31 February
 * quietly becoming 3 March), and differ between C libraries.
 */
#include "base/httpdate.h"

#include <errno.h>
#include <stdbool.h>
#include <string.h>

#include "base/buf.h"

static const char months[] = "JanFebMarAprMayJunJulAugSepOctNovDec";
static const char days[] = "SunMonTueWedThuFriSat";

void httpdate_format(time_t t, char out[HTTPDATE_SIZE])
{
	/* Four-digit years only: what no HTTP date can say is clamped. */
	if (t < 0)
		t = 0;
	if (t > (time_t)253402300799) /* 9999-12-31 23:59:59 */
		t = (time_t)253402300799;
	struct tm tm;
	gmtime_r(&t, &tm);
	char *p = out;
	memcpy(p, days + 3 * tm.tm_wday, 3);
	memcpy(p + 3, ", ", 2);
	p = u64_dec(p + 5, (uint64_t)tm.tm_mday, 2);
	*p++ = ' ';
	memcpy(p, months + 3 * tm.tm_mon, 3);
	p[3] = ' ';
	p = u64_dec(p + 4, (uint64_t)tm.tm_year + 1900, 4);
	*p++ = ' ';
	p = u64_dec(p, (uint64_t)tm.tm_hour, 2);
	*p++ = ':';
	p = u64_dec(p, (uint64_t)tm.tm_min, 2);
	*p++ = ':';
	p = u64_dec(p, (uint64_t)tm.tm_sec, 2);
	memcpy(p, " GMT", 5);
}

void httpdate_now(char out[HTTPDATE_SIZE])
{
	/* initial-exec, as base/log.c's: no __tls_get_addr, so the binary needs
	 * no ld-linux.so by name (the container's runtime stage lists what it links). */
	static __thread __attribute__((tls_model("initial-exec"))) time_t last = -1;
	static __thread __attribute__((tls_model("initial-exec"))) char text[HTTPDATE_SIZE];
	time_t t = time(NULL);
	if (t != last) {
		httpdate_format(t, text);
		last = t;
	}
	memcpy(out, text, HTTPDATE_SIZE);
}

/* n decimal digits at p. */
static bool digits(const char *p, size_t n, int *v)
{
	*v = 0;
	for (size_t i = 0; i < n; i++) {
		if (p[i] < '0' || p[i] > '9')
			return false;
		*v = *v * 10 + (p[i] - '0');
	}
	return true;
}

/* Seconds east of UTC for the zone z, or false. */
static bool zone_offset(const char *z, size_t n, bool zoned, long *off)
{
	*off = 0;
	if (n == 3 && memcmp(z, "GMT", 3) == 0)
		return true;
	if (!zoned)
		return false;
	if ((n == 3 && memcmp(z, "UTC", 3) == 0) || (n == 1 && z[0] == 'Z'))
		return true;
	int zh, zm;
	if (n != 5 || (z[0] != '+' && z[0] != '-') || !digits(z + 1, 2, &zh) ||
	    !digits(z + 3, 2, &zm) || zh > 23 || zm > 59)
		return false;
	*off = (z[0] == '-' ? -1 : 1) * (zh * 3600L + zm * 60L);
	return true;
}

/* The month whose three-letter name is at p (1-12), or 0. */
static int month_at(const char *p)
{
	for (int i = 0; i < 12; i++)
		if (memcmp(p, months + 3 * i, 3) == 0)
			return i + 1;
	return 0;
}

/* "HH:MM:SS" at p. */
static bool time_at(const char *p, int *h, int *mi, int *sec)
{
	return digits(p, 2, h) && p[2] == ':' && digits(p + 3, 2, mi) && p[5] == ':' &&
	       digits(p + 6, 2, sec);
}

/* n letters at p. */
static bool letters(const char *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!((p[i] >= 'A' && p[i] <= 'Z') || (p[i] >= 'a' && p[i] <= 'z')))
			return false;
	return true;
}

/* "Sunday, 06-Nov-94 08:49:37 GMT" (v trimmed). */
static int parse_rfc850(struct slice v, time_t now, time_t *out)
{
	const char *comma = memchr(v.p, ',', v.len);
	if (!comma || comma - v.p < 6 || !letters(v.p, (size_t)(comma - v.p)))
		return -EINVAL;
	const char *q = comma + 1; /* " 06-Nov-94 08:49:37 GMT" */
	if (v.p + v.len - q != 23)
		return -EINVAL;
	int d, mon = month_at(q + 4), yy, h, mi, sec;
	if (q[0] != ' ' || !digits(q + 1, 2, &d) || q[3] != '-' || !mon || q[7] != '-' ||
	    !digits(q + 8, 2, &yy) || q[10] != ' ' || !time_at(q + 11, &h, &mi, &sec) ||
	    q[19] != ' ' || memcmp(q + 20, "GMT", 3) != 0)
		return -EINVAL;
	struct tm tm;
	gmtime_r(&now, &tm);
	int year = tm.tm_year + 1900;
	int y = year - year % 100 + yy;
	if (y > year + 50)
		y -= 100;
	time_t t;
	if (utc_time(y, mon, d, h, mi, sec, &t))
		return -EINVAL;
	*out = t;
	return 0;
}

/* "Sun Nov  6 08:49:37 1994" (v trimmed; "Nov 06" and "Nov 6" too). */
static int parse_asctime(struct slice v, time_t *out)
{
	const char *p = v.p;
	size_t n = v.len;
	int d, mon, h, mi, sec, y;
	if (n < 23 || !letters(p, 3) || p[3] != ' ' || !(mon = month_at(p + 4)) || p[7] != ' ')
		return -EINVAL;
	const char *q = p + 8;
	if (n == 24 && q[0] == ' ' && digits(q + 1, 1, &d))
		q += 2;
	else if (n == 24 && digits(q, 2, &d))
		q += 2;
	else if (n == 23 && digits(q, 1, &d))
		q += 1;
	else
		return -EINVAL;
	if (q[0] != ' ' || !time_at(q + 1, &h, &mi, &sec) || q[9] != ' ' || !digits(q + 10, 4, &y))
		return -EINVAL;
	time_t t;
	if (utc_time(y, mon, d, h, mi, sec, &t))
		return -EINVAL;
	*out = t;
	return 0;
}

static int parse(const char *s, bool zoned, time_t *out)
{
	if (!s)
		return -EINVAL;
	struct slice v = slice_trim(slice_cstr(s));
	const char *p = v.p, *end = v.p + v.len;
	/* "Www, " */
	if (v.len < 5 || memchr(p, ',', 3) || p[3] != ',' || p[4] != ' ')
		return -EINVAL;
	p += 5;
	/* "D[D] Mon YYYY HH:MM:SS " and a zone of at least one character. */
	int d, mon = 0, y, h, mi, sec;
	size_t dl = end - p > 1 && p[1] == ' ' ? 1 : 2;
	if (end - p < (long)dl + 20 || !digits(p, dl, &d) || p[dl] != ' ')
		return -EINVAL;
	p += dl + 1;
	mon = month_at(p);
	if (!mon || p[3] != ' ' || !digits(p + 4, 4, &y) || p[8] != ' ' || !digits(p + 9, 2, &h) ||
	    p[11] != ':' || !digits(p + 12, 2, &mi) || p[14] != ':' || !digits(p + 15, 2, &sec) ||
	    p[17] != ' ')
		return -EINVAL;
	long off;
	if (!zone_offset(p + 18, (size_t)(end - (p + 18)), zoned, &off))
		return -EINVAL;
	time_t t;
	if (utc_time(y, mon, d, h, mi, sec, &t))
		return -EINVAL;
	*out = t - off;
	return 0;
}

int utc_time(int y, int mon, int d, int h, int mi, int s, time_t *out)
{
	static const int mdays[] = { 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31 };
	if (y < 1970 || y > 9999 || mon < 1 || mon > 12 || d < 1 || h < 0 || h > 23 || mi < 0 ||
	    mi > 59 || s < 0 || s > 60)
		return -EINVAL;
	/* 23:59:60 is refused, as when timegm's next day failed the check
	 * that the day is the one asked for. */
	if (s == 60 && h == 23 && mi == 59)
		return -EINVAL;
	bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
	if (d > mdays[mon - 1] + (mon == 2 && leap))
		return -EINVAL;
	/* Days since 1970-01-01 of a year that starts in March, so that the
	 * leap day is the year's last (the usual civil-to-days arithmetic). */
	int ym = mon <= 2 ? y - 1 : y;
	int doy = (153 * (mon > 2 ? mon - 3 : mon + 9) + 2) / 5 + d - 1;
	long n = (long)ym * 365 + ym / 4 - ym / 100 + ym / 400 + doy - 719468L;
	*out = (time_t)n * 86400 + h * 3600 + mi * 60 + s;
	return 0;
}

int httpdate_parse(const char *s, time_t *out)
{
	return parse(s, false, out);
}

int httpdate_parse_any(const char *s, time_t now, time_t *out)
{
	if (parse(s, false, out) == 0)
		return 0;
	if (!s)
		return -EINVAL;
	struct slice v = slice_trim(slice_cstr(s));
	return memchr(v.p, ',', v.len) ? parse_rfc850(v, now, out) : parse_asctime(v, out);
}

int httpdate_parse_zoned(const char *s, time_t *out)
{
	return parse(s, true, out);
}
