/* tests/test_fp_text.py: one mark, whose probe does the conversions. */
#include <sys/sdt.h>
int main(void) { DTRACE_PROBE(fpt, go); return 0; }
