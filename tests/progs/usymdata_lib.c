/* The shared library of usymdata_main.c: data objects of a library. */
long lib_table[8] = {1, 2, 3, 4, 5, 6, 7, 8};

__attribute__((noipa)) long *lib_addr(int i) { return &lib_table[i]; }
