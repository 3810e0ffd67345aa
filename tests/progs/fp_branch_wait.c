/* fp_branch.S driven after a line on stdin: a process to attach to whose
 * probed loop has a rel8 branch into a displaced window (retargeted through
 * dead padding), so a detach must also give those bytes back. */
#include <stdio.h>
#include <stdlib.h>

int fp_branch(int n);

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 10;
    char line[8];
    printf("ready\n");
    fflush(stdout);
    if (!fgets(line, sizeof line, stdin))
        return 2;
    int r = fp_branch(n);
    printf("fp_branch looped %d plain 1 result %d\n", n - 1, r);
    return r == n - 1 ? 0 : 1;
}
