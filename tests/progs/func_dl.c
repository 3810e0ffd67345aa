/* dlopen/dlclose loop: argv[1] is the library (a path, or a bare name found
 * through this program's RUNPATH), argv[2] the iterations; each loads the library,
 * calls lib_f twice and unloads it, checking the unload really happened and that the
 * cycles leave no mappings behind. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

/* KiB mapped in this process */
static long mapped_kib(void)
{
    FILE *f = fopen("/proc/self/maps", "r");
    unsigned long lo, hi;
    long kib = 0;
    char line[512];
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "%lx-%lx", &lo, &hi) == 2)
            kib += (long)((hi - lo) / 1024);
    if (f)
        fclose(f);
    return kib;
}

int main(int argc, char **argv)
{
    const char *lib = argc > 1 ? argv[1] : "libfuncdl.so";
    long n = argc > 2 ? atol(argv[2]) : 10, sum = 0, unloaded = 0, kib_at_2 = 0;
    for (long i = 0; i < n; i++) {
        if (i == 2)
            kib_at_2 = mapped_kib();
        void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
        if (!h) {
            fprintf(stderr, "dlopen: %s\n", dlerror());
            return 1;
        }
        long (*f)(long) = (long (*)(long))dlsym(h, "lib_f");
        sum += f(i) + f(1000 + i);
        if (dlclose(h) != 0)
            return 2;
        void *again = dlopen(lib, RTLD_NOW | RTLD_NOLOAD);
        unloaded += again == NULL;
        if (again)
            dlclose(again);
    }
    /* nothing a load/unload cycle leaves mapped (a tracer's stubs included) */
    long grown = mapped_kib() - kib_at_2; /* a leaked page per cycle would be 800 KiB */
    printf("sum=%ld unloaded=%ld leaked=%s\n", sum, unloaded, grown > 256 ? "yes" : "no");
    return 0;
}
