/* Uses the wrapped puts and getenv of librtld_next_wrap.so (linked in). */
#include <stdio.h>
#include <stdlib.h>

int main(void) {
    puts("hello");
    printf("probe=%s\n", getenv("RTLD_NEXT_WRAP_PROBE"));
    printf("path_set=%d\n", getenv("PATH") != NULL);
    return 0;
}
