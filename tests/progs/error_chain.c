/* Three hits of one mark, its argument 0, 1, 2 (tests/test_error_context.py). */
#include <sys/sdt.h>

int main(void)
{
    for (volatile int i = 0; i < 3; i++)
        STAP_PROBE1(pd, tick, i);
    return 0;
}
