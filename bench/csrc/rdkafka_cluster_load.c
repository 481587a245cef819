/* Load client for bench_cluster.py, in C on librdkafka so the client is not the bottleneck.
 *
 *   rdkafka_cluster_load produce BOOTSTRAP TOPIC COUNT SIZE PARTITIONS [key=value ...]
 *   rdkafka_cluster_load latency BOOTSTRAP TOPIC RATE_MB SIZE SECONDS PARTITIONS [key=value ...]
 *
 * Records go to partitions 0..PARTITIONS-1 in turn. Every key=value is a librdkafka producer
 * setting, applied as given (the caller names acks, linger.ms, batch.size, idempotence,
 * compression and the rest explicitly). `produce` sends COUNT records as fast as the queue
 * allows; `latency` offers RATE_MB MB/s for SECONDS and reports librdkafka's per-record
 * delivery latency (produce call to acknowledgement). Both first send one record to each partition
 * and wait for its acknowledgement, untimed (warmup_seconds in the output).
 *
 * Prints one JSON line. Every wait is bounded (MAX_SECONDS).
 */
#include <librdkafka/rdkafka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_SECONDS 300

static long long delivered, failed;
static char first_error[256];
static long long *lat_us;  /* latency mode: one entry per acknowledged record */
static size_t lat_n, lat_cap;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void on_delivery(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
    (void)rk; (void)opaque;
    if (m->err) {
        if (!failed) {  /* kept JSON-safe */
            snprintf(first_error, sizeof first_error, "%s", rd_kafka_err2str(m->err));
            for (char *c = first_error; *c; c++)
                if (*c == '"' || *c == '\\' || (unsigned char)*c < 0x20) *c = '\'';
        }
        failed++;
        return;
    }
    delivered++;
    if (lat_us) {
        if (lat_n == lat_cap) {
            lat_cap *= 2;
            lat_us = realloc(lat_us, lat_cap * sizeof *lat_us);
            if (!lat_us) { fprintf(stderr, "out of memory\n"); exit(2); }
        }
        lat_us[lat_n++] = rd_kafka_message_latency(m);
    }
}

static rd_kafka_t *producer(const char *bootstrap, int nsettings, char **settings)
{
    char err[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    if (rd_kafka_conf_set(conf, "bootstrap.servers", bootstrap, err, sizeof err) != RD_KAFKA_CONF_OK) {
        fprintf(stderr, "bootstrap.servers: %s\n", err);
        exit(2);
    }
    for (int i = 0; i < nsettings; i++) {
        char *eq = strchr(settings[i], '=');
        if (!eq) { fprintf(stderr, "not key=value: %s\n", settings[i]); exit(2); }
        *eq = 0;
        if (rd_kafka_conf_set(conf, settings[i], eq + 1, err, sizeof err) != RD_KAFKA_CONF_OK) {
            fprintf(stderr, "%s: %s\n", settings[i], err);
            exit(2);
        }
        *eq = '=';
    }
    rd_kafka_conf_set_dr_msg_cb(conf, on_delivery);
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof err);
    if (!rk) { fprintf(stderr, "%s\n", err); exit(2); }
    return rk;
}

static char *make_payload(int size)
{
    char *payload = malloc(size > 0 ? size : 1);
    for (int i = 0; i < size; i++) payload[i] = (char)i;
    return payload;
}

/* 0 on success, 1 when the queue stayed full past the deadline, 2 on any other produce error */
static int send_one(rd_kafka_t *rk, rd_kafka_topic_t *rkt, int partition, char *payload, int size,
                    double deadline)
{
    /* librdkafka keeps a pointer to the payload (no copy): it is never freed or changed */
    while (rd_kafka_produce(rkt, partition, 0, payload, size, NULL, 0, NULL) != 0) {
        if (rd_kafka_last_error() != RD_KAFKA_RESP_ERR__QUEUE_FULL) {
            fprintf(stderr, "produce: %s\n", rd_kafka_err2str(rd_kafka_last_error()));
            return 2;
        }
        rd_kafka_poll(rk, 1);
        if (now() > deadline) return 1;
    }
    return 0;
}

/* One record per partition, acknowledged, before the clock starts: connections, metadata and (for an
 * idempotent producer) the producer id are set up outside the measurement. Returns its seconds. */
static double warm_up(rd_kafka_t *rk, rd_kafka_topic_t *rkt, int partitions, char *payload, int size)
{
    double start = now(), deadline = start + 60;
    for (int p = 0; p < partitions; p++)
        if (send_one(rk, rkt, p, payload, size, deadline)) break;
    while (delivered + failed < partitions && now() < deadline)
        rd_kafka_poll(rk, 10);
    delivered = failed = 0;
    first_error[0] = 0;
    lat_n = 0;
    return now() - start;
}

static int produce(const char *bootstrap, const char *topic, long long count, int size, int partitions,
                   int nsettings, char **settings)
{
    rd_kafka_t *rk = producer(bootstrap, nsettings, settings);
    rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, topic, NULL);
    char *payload = make_payload(size);
    double warm = warm_up(rk, rkt, partitions, payload, size);
    double start = now(), deadline = start + MAX_SECONDS;
    long long sent = 0;
    for (; sent < count; sent++)
        if (send_one(rk, rkt, (int)(sent % partitions), payload, size, deadline)) break;
    while (delivered + failed < sent && now() < deadline)
        rd_kafka_poll(rk, 10);
    double seconds = now() - start;
    printf("{\"records\": %lld, \"bytes\": %lld, \"seconds\": %.6f, \"errors\": %lld, \"first_error\": \"%s\", "
           "\"warmup_seconds\": %.3f}\n", delivered, delivered * size, seconds, failed, first_error, warm);
    rd_kafka_topic_destroy(rkt);
    rd_kafka_destroy(rk);
    free(payload);
    return failed || delivered < count;
}

static int cmp_ll(const void *a, const void *b)
{
    long long x = *(const long long *)a, y = *(const long long *)b;
    return (x > y) - (x < y);
}

static double pick_ms(double q)
{
    if (!lat_n) return -1;
    size_t i = (size_t)(q * lat_n);
    if (i >= lat_n) i = lat_n - 1;
    return lat_us[i] / 1000.0;
}

static int latency(const char *bootstrap, const char *topic, double rate_mb, int size, double seconds,
                   int partitions, int nsettings, char **settings)
{
    lat_cap = 1 << 16;
    lat_us = malloc(lat_cap * sizeof *lat_us);
    rd_kafka_t *rk = producer(bootstrap, nsettings, settings);
    rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, topic, NULL);
    char *payload = make_payload(size);
    double per_second = rate_mb * 1e6 / size;
    double warm = warm_up(rk, rkt, partitions, payload, size);
    if (seconds > MAX_SECONDS) seconds = MAX_SECONDS;
    double start = now(), end = start + seconds, deadline = start + MAX_SECONDS;
    long long sent = 0;
    struct timespec pause = {0, 500000};
    int stuck = 0;
    for (double t = now(); t < end && !stuck; t = now()) {
        /* paced by elapsed time: a sleep that overshoots is caught up on the next tick */
        long long due = (long long)(per_second * (t - start)) - sent;
        for (long long i = 0; i < due; i++, sent++)
            if ((stuck = send_one(rk, rkt, (int)(sent % partitions), payload, size, end + 5))) break;
        rd_kafka_poll(rk, 0);
        nanosleep(&pause, NULL);
    }
    double offered_seconds = now() - start;
    while (delivered + failed < sent && now() < deadline && now() < end + 60)
        rd_kafka_poll(rk, 10);
    qsort(lat_us, lat_n, sizeof *lat_us, cmp_ll);
    printf("{\"records\": %lld, \"sent\": %lld, \"errors\": %lld, \"first_error\": \"%s\", "
           "\"achieved_mb_s\": %.3f, \"p50_ms\": %.3f, \"p99_ms\": %.3f, \"max_ms\": %.3f, "
           "\"warmup_seconds\": %.3f}\n",
           delivered, sent, failed, first_error, sent * (double)size / offered_seconds / 1e6,
           pick_ms(0.50), pick_ms(0.99), lat_n ? lat_us[lat_n - 1] / 1000.0 : -1.0, warm);
    rd_kafka_topic_destroy(rkt);
    rd_kafka_destroy(rk);
    free(payload);
    free(lat_us);
    return failed || stuck;
}

int main(int argc, char **argv)
{
    if (argc >= 7 && !strcmp(argv[1], "produce"))
        return produce(argv[2], argv[3], atoll(argv[4]), atoi(argv[5]), atoi(argv[6]) > 0 ? atoi(argv[6]) : 1,
                       argc - 7, argv + 7);
    if (argc >= 8 && !strcmp(argv[1], "latency"))
        return latency(argv[2], argv[3], atof(argv[4]), atoi(argv[5]), atof(argv[6]),
                       atoi(argv[7]) > 0 ? atoi(argv[7]) : 1, argc - 8, argv + 8);
    fprintf(stderr, "usage: rdkafka_cluster_load produce BOOTSTRAP TOPIC COUNT SIZE PARTITIONS [key=value ...]\n"
                    "       rdkafka_cluster_load latency BOOTSTRAP TOPIC RATE_MB SIZE SECONDS PARTITIONS [key=value ...]\n");
    return 2;
}
