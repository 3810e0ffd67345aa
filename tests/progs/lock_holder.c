/* lock_holder N [loop]: a child hits "hold" once (the test's guru handler stops it
 * there, with the globals lock held) and the parent, once the child is stopped, hits
 * "work" N times and prints "parent done N"; with "loop" it says "looping" and hits
 * "work" every millisecond until killed.  The stopped child is left for the test to
 * kill: its pid is the first line. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sdt.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    if (argc < 2)
        return 2;
    long n = atol(argv[1]);
    int loop = argc > 2 && strcmp(argv[2], "loop") == 0;
    pid_t pid = fork();
    if (pid == 0) {
        close(1); /* stopped, it must not keep the test's pipes open */
        close(2);
        STAP_PROBE(lh, hold);
        _exit(0);
    }
    printf("child %d\n", (int)pid);
    fflush(stdout);
    int st;
    if (waitpid(pid, &st, WUNTRACED) != pid || !WIFSTOPPED(st)) {
        printf("child not stopped\n");
        return 1;
    }
    if (loop) {
        printf("looping\n");
        fflush(stdout);
    }
    for (long i = 0; i < n || loop; i++) {
        STAP_PROBE1(lh, work, i);
        if (loop)
            usleep(1000);
    }
    printf("parent done %ld\n", n);
    return 0;
}
