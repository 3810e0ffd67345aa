/* rel_child.c -- a short-lived exec'd worker for the fork/exec storm. */
#include <stdlib.h>
#include <sys/sdt.h>
int main(int argc, char **argv)
{
    long i = argc > 1 ? atol(argv[1]) : 0;
    DTRACE_PROBE2(rel, child, i, (long)sizeof(void *));
    return 0;
}
