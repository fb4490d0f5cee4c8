/* What qemu-user keeps of a thread that ended (scripts/cross.sh --full): starts and joins 1,000
 * threads one after the other, and prints RSS in KiB after 100 and after 1,000. Natively it
 * stays flat; under qemu-user it shows how far qemu, not the program, grows with thread churn. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

static void *nothing(void *arg) { return arg; }

static long rss_kib(void) {
    FILE *status = fopen("/proc/self/status", "r");
    char line[256];
    long kib = -1;
    if (!status) return -1;
    while (fgets(line, sizeof line, status))
        if (!strncmp(line, "VmRSS:", 6)) sscanf(line + 6, "%ld", &kib);
    fclose(status);
    return kib;
}

int main(void) {
    long after_100 = -1;
    for (int i = 0; i < 1000; i++) {
        pthread_t thread;
        if (pthread_create(&thread, NULL, nothing, NULL) != 0 || pthread_join(thread, NULL) != 0) return 1;
        if (i == 99) after_100 = rss_kib();
    }
    printf("%ld %ld\n", after_100, rss_kib());
    return 0;
}
