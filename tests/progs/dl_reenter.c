/* dl_reenter DIR: the loader re-entered from code it runs, and forks around it, with
 * the libraries DIR/libdlt_{a,b,c,d,e}.so (dl_reenter_lib.c, roles 1-5).  Prints "ok"
 * and exits 0, or says what failed and exits 1; a child that hangs is ended by
 * alarm() and reported. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *dir;

static char *lib_path(const char *name)
{
    static char paths[8][4096];
    static int next;
    char *p = paths[next++ % 8];
    snprintf(p, sizeof paths[0], "%s/libdlt_%s.so", dir, name);
    return p;
}

static void fail(const char *what)
{
    printf("FAIL: %s\n", what);
    exit(1);
}

static void *open_lib(const char *name)
{
    void *h = dlopen(lib_path(name), RTLD_NOW);
    if (!h) {
        printf("FAIL: dlopen %s: %s\n", name, dlerror());
        exit(1);
    }
    return h;
}

static void hit(void *h) { ((void (*)(void))dlsym(h, "dlt_hit"))(); }

static void wait_ok(pid_t pid, const char *what)
{
    int st;
    if (pid < 0 || waitpid(pid, &st, 0) != pid)
        fail("fork/waitpid");
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        printf("FAIL: %s: child %s %d\n", what, WIFSIGNALED(st) ? "killed by signal" : "exited",
               WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
        exit(1);
    }
}

static void *slow_open(void *arg)
{
    (void)arg;
    return open_lib("e");
}

int main(int argc, char **argv)
{
    if (argc != 2)
        return 2;
    dir = argv[1];
    setenv("DLT_D", lib_path("d"), 1);

    /* dlclose from a destructor that dlclose runs */
    void *b = open_lib("b");
    hit(b);
    void *a = open_lib("a");
    hit(a);
    ((void (*)(void *))dlsym(a, "dlt_keep"))(b);
    if (dlclose(a) != 0)
        fail("dlclose a");
    if (dlopen(lib_path("b"), RTLD_NOW | RTLD_NOLOAD))
        fail("b still loaded after a's destructor closed it");

    /* dlopen and dlclose from a constructor that dlopen runs */
    void *c = open_lib("c");
    hit(c);
    if (dlclose(c) != 0)
        fail("dlclose c");

    /* fork, then the loader in the child (libpam's pam_end after a fork) */
    b = open_lib("b");
    pid_t pid = fork();
    if (pid == 0) {
        alarm(5);
        hit(b);
        if (dlclose(b) != 0)
            _exit(3);
        hit(open_lib("b"));
        _exit(0);
    }
    wait_ok(pid, "dlclose and dlopen after fork");

    /* fork while another thread is inside dlopen (a constructor running) */
    int fds[2];
    char fd[16], byte;
    if (pipe(fds) != 0)
        fail("pipe");
    snprintf(fd, sizeof fd, "%d", fds[1]);
    setenv("DLT_FD", fd, 1);
    pthread_t t;
    if (pthread_create(&t, NULL, slow_open, NULL) != 0)
        fail("pthread_create");
    if (read(fds[0], &byte, 1) != 1)
        fail("read");
    pid = fork();
    if (pid == 0) {
        alarm(5);
        void *d = open_lib("d");
        hit(d);
        if (dlclose(d) != 0)
            _exit(3);
        hit(b);
        _exit(0);
    }
    wait_ok(pid, "dlopen in a child forked while a thread was inside dlopen");
    void *e;
    pthread_join(t, &e);
    if (!e)
        fail("slow dlopen");
    printf("ok\n");
    return 0;
}
