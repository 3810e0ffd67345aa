/* Drawing a histogram as stap does (pd_hist.c). */
#ifndef PD_HIST_H
#define PD_HIST_H

#include <stddef.h>
#include <stdint.h>

/* Draws the n buckets h into buf (cap bytes, kept NUL-terminated; what does not fit is
 * cut, as snprintf cuts) and returns the length of the whole drawing, 0 when every
 * bucket is 0.  log: stap's log2 buckets, value 0 in bucket n / 2; else linear ones from
 * start by interval, bucket 0 the underflow and n - 1 the overflow.  width is the bar of
 * the largest bucket (stap's HIST_WIDTH), elision the zero rows kept around the data
 * (HIST_ELISION; negative: none left out). */
size_t pd_hist_draw(char *buf, size_t cap, const int64_t *h, uint32_t n, int log,
                    int64_t start, int64_t interval, int width, int elision);

#endif
