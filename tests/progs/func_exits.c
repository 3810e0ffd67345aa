/* Functions with several exits (tests/test_func_exits.py): early returns, a switch
 * through a jump table, a tail call, an epilogue reached by branches, recursion,
 * longjmp out of a probed frame and threads.  Prints what each function returned, so
 * a probe's counts and $return sums can be checked exactly against the program. */
#include <pthread.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>

#define NOIPA __attribute__((noipa))

static long sums[8], calls[8];
#define NOTE(i, v) (calls[i]++, sums[i] += (v))

NOIPA long early(long x)
{
    if (x < 0)
        return -1;
    if (x % 3 == 0)
        return x / 3;
    if (x % 5 == 0)
        return x * 2 + 1;
    long r = 0;
    for (long i = 0; i < (x & 7); i++)
        r += i * x;
    return r;
}

NOIPA long table(int k, long x)
{
    switch (k) {
    case 0: return x + 11;
    case 1: return x * 7;
    case 2: return x - 5;
    case 3: return x ^ 0x55;
    case 4: return x << 2;
    case 5: return x / 3;
    case 6: return -x;
    case 7: return x * x;
    default: return 42;
    }
}

NOIPA long leaf2(long x) { return x * 5 + 1; }

NOIPA long tail(long x)
{
    if (x & 1)
        return leaf2(x + 1); /* a tail call at -O2 */
    return x / 2;
}

NOIPA long epilogue(long x)
{
    long r = 1;
    while (x > 1) {
        if (x % 97 == 0)
            break;
        r = r * 3 % 1000003;
        x = x & 1 ? 3 * x + 1 : x / 2;
    }
    return r + x;
}

static long rec_calls, rec_sum;
NOIPA long rec(long n)
{
    long r = n <= 0 ? 0 : (rec(n - 1) ^ n) + 1; /* not a loop: xor is no accumulator */
    rec_calls++;
    rec_sum += r;
    return r;
}

static jmp_buf jb;
NOIPA long jumper(long x)
{
    if (x % 4 == 0)
        longjmp(jb, 1); /* out of the probed frame: its return never comes */
    return x + 1;
}

static void *worker(void *arg)
{
    long s = 0;
    for (long i = 0; i < 20000; i++)
        s += early(i + (long)arg);
    return (void *)s;
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 1000;
    for (long i = -3; i < n; i++)
        NOTE(0, early(i));
    for (long i = 0; i < n; i++)
        NOTE(1, table((int)(i % 10), i));
    for (long i = 0; i < n; i++)
        NOTE(2, tail(i));
    for (long i = 1; i <= n; i++)
        NOTE(3, epilogue(i));
    rec(10000);
    volatile long jumps = 0, jsum = 0;
    for (long i = 0; i < n; i++) {
        if (setjmp(jb)) {
            jumps++;
            continue;
        }
        jsum += jumper(i);
    }
    pthread_t t[4];
    long tsum = 0;
    for (long i = 0; i < 4; i++)
        pthread_create(&t[i], NULL, worker, (void *)(i * 100000));
    for (int i = 0; i < 4; i++) {
        void *r;
        pthread_join(t[i], &r);
        tsum += (long)r;
    }
    printf("early %ld %ld\n", calls[0] + 80000, sums[0] + tsum);
    printf("table %ld %ld\n", calls[1], sums[1]);
    printf("tail %ld %ld\n", calls[2], sums[2]);
    printf("leaf2 %ld\n", n / 2);
    printf("epilogue %ld %ld\n", calls[3], sums[3]);
    printf("rec %ld %ld\n", rec_calls, rec_sum);
    printf("jumper %ld %ld jumps %ld\n", n - jumps, (long)jsum, (long)jumps);
    return 0;
}
