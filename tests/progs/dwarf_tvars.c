/* Target variables through DWARF types, for tests/test_target_vars.py (built
 * with -g at -O0 and -O2, m64 and m32): members through pointers at any depth,
 * a struct member of a struct, arrays of scalars and of structs, char arrays and
 * char pointers as strings, a union, bitfields, an enum, typedef chains, an
 * anonymous union, a global and a static.  `./dwarf_tvars N` calls visit(&n, i)
 * for i < N with values that depend on i, so each hit is checked exactly. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PROBED __attribute__((noinline, noclone))

enum color { RED = 1, GREEN = 2, BLUE = 7 };
typedef long count_t;
typedef count_t total_t;            /* a typedef of a typedef */

struct name {
    char text[12];
    const char *alias;
};

struct node {
    int a;
    short s;
    unsigned flag : 1;
    signed int level : 5;
    unsigned wide : 20;
    enum color color;
    total_t total;
    struct name nm;                 /* a struct inside a struct */
    struct node *next;
    int arr[4];
    struct name names[2];
    union {                         /* anonymous: its members are the node's */
        int as_int;
        unsigned char bytes[4];
    };
    union {
        long l;
        short h[2];
    } u;
};

struct node *global_head;
static int counter_static = 40;

PROBED long visit(struct node *n, int i)
{
    return n->a + i + counter_static + (global_head != 0);
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 3;
    static struct node tail = {.a = -9, .nm = {"tail", "t-alias"}};
    struct node head;
    long sum = 0;
    global_head = &head;
    for (int i = 0; i < n; i++) {
        memset(&head, 0, sizeof head);
        head.a = 100 + i;
        head.s = -2 - i;
        head.flag = i & 1;
        head.level = -3 + i;
        head.wide = 1000000 + i;
        head.color = i == 0 ? RED : i == 1 ? GREEN : BLUE;
        head.total = 5000000000L * (i + 1) / 1000;
        snprintf(head.nm.text, sizeof head.nm.text, "node-%d", i);
        head.nm.alias = "alias";
        head.next = &tail;
        for (int k = 0; k < 4; k++)
            head.arr[k] = 10 * i + k;
        snprintf(head.names[1].text, sizeof head.names[1].text, "second-%d", i);
        head.as_int = 0x00020304 + i;   /* a NUL byte ends .bytes as a string */
        head.u.l = -1L - i;
        sum += visit(&head, i);
        counter_static++;
    }
    printf("sum=%ld\n", sum);
    return 0;
}
