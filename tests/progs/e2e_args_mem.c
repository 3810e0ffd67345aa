/* Marks whose operands are all memory references: the "m" constraint gives
 * sym(%rip), sym@GOTOFF(%ebx) or absolute sym, %fs:sym@tpoff / %gs:sym@ntpoff,
 * and frame-relative locals, at every optimisation level.  Part of e2e_args. */
#define STAP_SDT_ARG_CONSTRAINT m
#include <stdio.h>
#include <sys/sdt.h>

#define V(x) ((long long)(x))
/* Every line names the build (-DE2E_TAG="m64-O2"), so several builds can share a session. */
#ifndef E2E_TAG
#define E2E_TAG "e2e"
#endif
#define EXPECT(fmt, ...) printf("expect " E2E_TAG " " fmt, __VA_ARGS__)

extern __thread int e2e_tls;
extern int e2e_global;
extern long long e2e_global_ll;
extern int e2e_arr[8];
static unsigned char e2e_static_uc = 0xf0;
static short e2e_static_s = -2;

void e2e_mem_probes(int argc)
{
    volatile int local = -argc * 7;
    EXPECT("mem %lld %lld %lld %lld %lld %lld %lld\n", V(e2e_tls), V(e2e_global),
           V(e2e_global_ll), V(e2e_arr[3]), V(e2e_static_uc), V(e2e_static_s), V(local));
    STAP_PROBE7(pydyn_e2e, mem, e2e_tls, e2e_global, e2e_global_ll, e2e_arr[3], e2e_static_uc,
                e2e_static_s, local);
}
