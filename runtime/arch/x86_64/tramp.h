/* x86-64 trampolines (pd_tramp.h's PD_ARCH_TRAMP_H): what differs from i386 in the
 * shared x86 stub machinery (../x86/tramp.h). */
#ifndef PD_ARCH_TRAMP_H_
#define PD_ARCH_TRAMP_H_

#include "../x86/tramp.h"

#define PD_TRAMP_REACH 0x7fff0000u /* rel32, less a margin: stubs are mapped near */

/* op reg, %fs:off: the thread's TLS word at `off`. */
static inline void pd_e_tls(struct pd_emit *e, uint8_t rex, uint8_t op, int reg, int32_t off)
{
    pd_e8(e, 0x64);
    if (rex)
        pd_e8(e, rex);
    pd_e8(e, op);
    pd_e8(e, (uint8_t)(((reg & 7) << 3) | 4)); /* SIB, no base or index: absolute disp32 */
    pd_e8(e, 0x25);
    pd_e32(e, (uint32_t)off);
}

#endif
