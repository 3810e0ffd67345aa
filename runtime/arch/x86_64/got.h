/* The relocations pd_got.c redirects on x86-64: RELA tables. */
#ifndef PD_ARCH_GOT_H_
#define PD_ARCH_GOT_H_
#include <link.h>

#define PD_R_JUMP_SLOT R_X86_64_JUMP_SLOT
#define PD_R_GLOB_DAT R_X86_64_GLOB_DAT
#define PD_R_TYPE(info) ELF64_R_TYPE(info)
#define PD_R_SYM(info) ELF64_R_SYM(info)
#define PD_DT_REL DT_RELA     /* the table's tag, also DT_PLTREL's value for it */
#define PD_DT_RELSZ DT_RELASZ
typedef ElfW(Rela) pd_rel;

#endif
