/* Driver for fp_branch.S: prints how many times each mark should have fired. */
#include <stdio.h>
#include <stdlib.h>

int fp_branch(int n);

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 10;
    int r = fp_branch(n);
    printf("fp_branch looped %d plain 1 result %d\n", n - 1, r);
    return r == n - 1 ? 0 : 1;
}
