/* worker JOBS: fires `job` JOBS times with the job number (built -m32 and -m64). */
#include <stdlib.h>
#include <sys/sdt.h>

int main(int argc, char **argv)
{
    long jobs = argc > 1 ? atol(argv[1]) : 100;
    for (long j = 0; j < jobs; j++)
        DTRACE_PROBE2(pydyn_example, job, j, (long)sizeof(void *));
    return 0;
}
