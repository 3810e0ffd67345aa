/* i386 trampolines (pd_tramp.h's PD_ARCH_TRAMP_H): what differs from x86-64 in the
 * shared x86 stub machinery (../x86/tramp.h). */
#ifndef PD_ARCH_TRAMP_H_
#define PD_ARCH_TRAMP_H_

#include "../x86/tramp.h"

#define PD_TRAMP_REACH 0 /* a rel32 wraps modulo 2^32: stubs may be anywhere */

/* op reg, %gs:off: the thread's TLS word at `off`. */
static inline void pd_e_tls(struct pd_emit *e, uint8_t rex, uint8_t op, int reg, int32_t off)
{
    (void)rex;
    pd_e8(e, 0x65);
    pd_e8(e, op);
    pd_e8(e, (uint8_t)(((reg & 7) << 3) | 5)); /* disp32 */
    pd_e32(e, (uint32_t)off);
}

#endif
