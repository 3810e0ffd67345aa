/* The libraries of dl_reenter.c, one per ROLE: each has a "hit" mark (its arg is the
 * role), and some call the loader from code the loader runs. */
#include <dlfcn.h>
#include <stdlib.h>
#include <unistd.h>
#include <sys/sdt.h>

#ifndef ROLE
#error "build with -DROLE=N"
#endif

void dlt_hit(void) { STAP_PROBE1(dlt, hit, ROLE); }

#if ROLE == 1 /* its destructor, run by dlclose, dlcloses the handle it was given */
static void *dlt_other;
void dlt_keep(void *h) { dlt_other = h; }
__attribute__((destructor)) static void dlt_fini(void)
{
    if (dlt_other && dlclose(dlt_other) != 0)
        abort();
}
#elif ROLE == 3 /* its constructor, run by dlopen, dlopens, fires and dlcloses another */
__attribute__((constructor)) static void dlt_init(void)
{
    void *h = dlopen(getenv("DLT_D"), RTLD_NOW);
    if (!h)
        abort();
    ((void (*)(void))dlsym(h, "dlt_hit"))();
    if (dlclose(h) != 0)
        abort();
}
#elif ROLE == 5 /* its constructor says it runs, then lingers inside dlopen */
__attribute__((constructor)) static void dlt_init(void)
{
    char c = 1;
    if (write(atoi(getenv("DLT_FD")), &c, 1) != 1)
        abort();
    usleep(300000);
}
#endif
