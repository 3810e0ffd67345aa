/* The one place the runtime chooses by machine: the arch folder's cpu.h, which names
 * the folder's other headers (PD_ARCH_REGS_H ...).  cpu.h needs nothing of the
 * segment, so pd_lock.h includes this on its own (tests/test_lock.py). */
#ifndef PD_ARCH_H
#define PD_ARCH_H

#if defined(__x86_64__)
#include "arch/x86_64/cpu.h"
#elif defined(__i386__)
#include "arch/i386/cpu.h"
#elif defined(__aarch64__)
#include "arch/aarch64/cpu.h"
#else
#error "pydyn runtime: unsupported architecture"
#endif

#endif
