/* The relocations pd_got.c redirects on i386: REL tables. */
#ifndef PD_ARCH_GOT_H_
#define PD_ARCH_GOT_H_
#include <link.h>

#define PD_R_JUMP_SLOT R_386_JMP_SLOT
#define PD_R_GLOB_DAT R_386_GLOB_DAT
#define PD_R_TYPE(info) ELF32_R_TYPE(info)
#define PD_R_SYM(info) ELF32_R_SYM(info)
#define PD_DT_REL DT_REL      /* the table's tag, also DT_PLTREL's value for it */
#define PD_DT_RELSZ DT_RELSZ
typedef ElfW(Rel) pd_rel;

#endif
