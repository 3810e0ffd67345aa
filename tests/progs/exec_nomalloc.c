/* exec_nomalloc MODE: a signal handler execs this program again ("child") with an
 * environment of its own, by execve (MODE v) or execle (MODE l), while malloc is
 * forbidden: the program's own malloc family (which every object binds to, the
 * preloaded runtime too) exits 99 when called.  exec is async-signal-safe; what
 * wraps it must be too.  The child hits "child" and prints "child ok". */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/sdt.h>
#include <unistd.h>

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void __libc_free(void *);

static volatile sig_atomic_t forbid;
static char *self, *mode;

static void refuse(void)
{
    static const char msg[] = "malloc called where exec must not allocate\n";
    if (write(2, msg, sizeof msg - 1) < 0)
        _exit(98);
    _exit(99);
}

void *malloc(size_t n)
{
    if (forbid)
        refuse();
    return __libc_malloc(n);
}

void *calloc(size_t n, size_t m)
{
    if (forbid)
        refuse();
    return __libc_calloc(n, m);
}

void *realloc(void *p, size_t n)
{
    if (forbid)
        refuse();
    return __libc_realloc(p, n);
}

void free(void *p)
{
    if (forbid && p)
        refuse();
    __libc_free(p);
}

static void on_usr1(int sig)
{
    (void)sig;
    char *argv[] = {self, "child", NULL};
    char *envp[] = {"EXEC_NOMALLOC=1", NULL};
    forbid = 1;
    if (mode[0] == 'l')
        execle(self, self, "child", (char *)NULL, envp);
    else
        execve(self, argv, envp);
    _exit(97);
}

int main(int argc, char **argv)
{
    if (argc != 2)
        return 2;
    self = argv[0];
    mode = argv[1];
    if (strcmp(mode, "child") == 0) {
        STAP_PROBE(exec_nomalloc, child);
        printf("child ok\n");
        return 0;
    }
    signal(SIGUSR1, on_usr1);
    raise(SIGUSR1);
    return 96;
}
