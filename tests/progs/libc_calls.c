/* Calls libc's memory, string and allocation functions a known number of times between
 * window_open() and window_close(): ROUNDS rounds (argv[1]), each calling every
 * do_NAME once.  The sizes are volatile and each call sits in a noinline function, so
 * gcc keeps every call; one round before the window binds the PLT slots and fills
 * malloc's cache, so nothing inside the window calls these functions but the rounds. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char src[512] = "a string pydyn's handlers read and print";
static char dst[512];
volatile size_t len = 77;
volatile int sink;

__attribute__((noinline)) void window_open(void) { __asm__ volatile(""); }
__attribute__((noinline)) void window_close(void) { __asm__ volatile(""); }

__attribute__((noinline)) void do_memcpy(void) { memcpy(dst, src, len); }
__attribute__((noinline)) void do_memset(void) { memset(dst + 128, 'x', len); }
__attribute__((noinline)) void do_strlen(void) { sink += (int)strlen(src + (len & 2)); }
__attribute__((noinline)) void do_memcmp(void) { sink += memcmp(dst, src, len); }
__attribute__((noinline)) void do_strcmp(void) { sink += strcmp(dst, src + (len & 2)); }
__attribute__((noinline)) void do_strchrnul(void) { sink += *strchrnul(src + (len & 2), 'z'); }
__attribute__((noinline)) void do_malloc(void)
{
    char *p = malloc(len);
    sink += p != NULL;
    free(p);
}

static void round_(void)
{
    do_memcpy();
    do_memset();
    do_strlen();
    do_memcmp();
    do_strcmp();
    do_strchrnul();
    do_malloc();
}

int main(int argc, char **argv)
{
    int rounds = argc > 1 ? atoi(argv[1]) : 10;
    round_();
    window_open();
    for (int i = 0; i < rounds; i++)
        round_();
    window_close();
    printf("rounds=%d\n", rounds);
    return 0;
}
