/* usymdata() (tests/test_usymdata.py): mark "data" passes the addresses of a global,
 * an element inside a global array, a library's array element, a heap block, a
 * string literal (in the executable's segments, in no symbol), a file-local static
 * and a byte inside a library's function.  The program prints
 * the literal's address and its own load base (dladdr's dli_fbase). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/sdt.h>

long *lib_addr(int i);

long counter = 7;
long table[8];
static int hidden_flag = 1; /* a local symbol of .symtab */

int main(void)
{
    void *heap = malloc(64);
    const char *lit = "a literal in .rodata" + hidden_flag; /* no symbol covers it */
    STAP_PROBE7(pydyn_test, data, &counter, &table[3], lib_addr(2), heap, lit, &hidden_flag,
                (char *)lib_addr + 1);
    Dl_info info;
    dladdr((void *)&counter, &info);
    printf("literal %p base %p\n", (void *)lit, info.dli_fbase);
    free(heap);
    return 0;
}
