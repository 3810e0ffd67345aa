/* Calls func_exit_target.S's exit_target n times; prints the calls and their sum. */
#include <stdio.h>
#include <stdlib.h>

long exit_target(long x), before_fn(long x), after_fn(long x);

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 1000, s = 0, other = 0;
    for (long i = 0; i < n; i++) {
        s += exit_target(i);
        other += before_fn(i) + after_fn(i);
    }
    printf("exit_target %ld %ld other %ld\n", n, s, other);
    return 0;
}
