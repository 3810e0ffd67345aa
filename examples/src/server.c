/* server NWORKERS JOBS: a 64-bit server that fires `request` once per worker
 * it starts, and forks+execs workers alternately 32-bit and 64-bit
 * (examples/bin/worker32, worker64 beside it), each doing JOBS jobs. */
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sdt.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    int nworkers = argc > 1 ? atoi(argv[1]) : 4;
    const char *jobs = argc > 2 ? argv[2] : "100";
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0)
        return 1;
    self[n] = 0;
    char *dir = dirname(self);
    for (int w = 0; w < nworkers; w++) {
        DTRACE_PROBE1(pydyn_example, request, w);
        char path[PATH_MAX];
        snprintf(path, sizeof path, "%s/%s", dir, w % 2 ? "worker64" : "worker32");
        pid_t pid = fork();
        if (pid == 0) {
            execl(path, path, jobs, (char *)NULL);
            perror(path);
            _exit(127);
        }
    }
    int status, failed = 0;
    while (wait(&status) > 0)
        failed += !WIFEXITED(status) || WEXITSTATUS(status) != 0;
    printf("server: %d workers done, %d failed\n", nworkers, failed);
    return failed != 0;
}
