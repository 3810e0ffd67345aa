/* x86-64 trampolines (pd_tramp.h's PD_ARCH_TRAMP_H): what differs from i386 in the
 * shared x86 stub machinery (../x86/tramp.h): how far its jumps reach. */
#ifndef PD_ARCH_TRAMP_H_
#define PD_ARCH_TRAMP_H_

#include "../x86/tramp.h"

#define PD_TRAMP_REACH 0x7fff0000u /* rel32, less a margin: stubs are mapped near */

#endif
