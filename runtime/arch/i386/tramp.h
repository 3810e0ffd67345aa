/* i386 trampolines (pd_tramp.h's PD_ARCH_TRAMP_H): what differs from x86-64 in the
 * shared x86 stub machinery (../x86/tramp.h): how far its jumps reach. */
#ifndef PD_ARCH_TRAMP_H_
#define PD_ARCH_TRAMP_H_

#include "../x86/tramp.h"

#define PD_TRAMP_REACH 0 /* a rel32 wraps modulo 2^32: stubs may be anywhere */

#endif
