/* Strings for tests/test_regex_groups.py: argv[1] names a file of lines
 * `PATTERN<TAB>SUBJECT`; each is passed to the mark regex:subject as (pattern index,
 * line number, the string), from the program's own memory. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sdt.h>

int main(int argc, char **argv)
{
    if (argc < 2)
        return 2;
    FILE *f = fopen(argv[1], "r");
    if (!f)
        return 2;
    char line[2048];
    int n = 0;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        char *tab = strchr(line, '\t');
        if (!tab)
            continue;
        *tab = 0;
        int pattern = atoi(line);
        const char *subject = tab + 1;
        DTRACE_PROBE3(regex, subject, pattern, n, subject);
        n++;
    }
    fclose(f);
    printf("done %d\n", n);
    return 0;
}
