/* Load client for bench_broker.py, in C on librdkafka so the client is not the bottleneck.
 *
 *   rdkafka_load produce BOOTSTRAP TOPIC COUNT SIZE ACKS
 *   rdkafka_load consume BOOTSTRAP TOPIC COUNT
 *
 * Prints one JSON line: {"records": n, "bytes": b, "seconds": s, "errors": e}.
 * Partition 0 only; every wait is bounded (MAX_SECONDS).
 */
#include <librdkafka/rdkafka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_SECONDS 300

static long long delivered, failed;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void on_delivery(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
    (void)rk; (void)opaque;
    if (m->err) failed++; else delivered++;
}

static rd_kafka_conf_t *config(const char *bootstrap)
{
    char err[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    if (rd_kafka_conf_set(conf, "bootstrap.servers", bootstrap, err, sizeof err) != RD_KAFKA_CONF_OK) {
        fprintf(stderr, "%s\n", err);
        exit(2);
    }
    if (getenv("RDK_DEBUG"))  /* librdkafka's own trace, for looking into a slow run */
        rd_kafka_conf_set(conf, "debug", getenv("RDK_DEBUG"), err, sizeof err);
    return conf;
}

static void set(rd_kafka_conf_t *conf, const char *k, const char *v)
{
    char err[512];
    if (rd_kafka_conf_set(conf, k, v, err, sizeof err) != RD_KAFKA_CONF_OK) {
        fprintf(stderr, "%s: %s\n", k, err);
        exit(2);
    }
}

static int produce(const char *bootstrap, const char *topic, long long count, int size, const char *acks)
{
    char err[512];
    rd_kafka_conf_t *conf = config(bootstrap);
    set(conf, "acks", acks);
    set(conf, "linger.ms", "20");
    set(conf, "batch.size", "1000000");
    set(conf, "batch.num.messages", "1000000");
    set(conf, "queue.buffering.max.messages", "2000000");
    set(conf, "queue.buffering.max.kbytes", "2097151");
    set(conf, "enable.idempotence", "false");
    set(conf, "compression.type", "none");
    rd_kafka_conf_set_dr_msg_cb(conf, on_delivery);
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof err);
    if (!rk) { fprintf(stderr, "%s\n", err); return 2; }
    rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, topic, NULL);
    char *payload = malloc(size);
    for (int i = 0; i < size; i++) payload[i] = (char)i;
    double start = now(), deadline = start + MAX_SECONDS;
    for (long long i = 0; i < count && now() < deadline;) {
        /* librdkafka keeps a pointer to the payload (no copy): it is never freed or changed */
        if (rd_kafka_produce(rkt, 0, 0, payload, size, NULL, 0, NULL) == 0) {
            i++;
        } else if (rd_kafka_last_error() == RD_KAFKA_RESP_ERR__QUEUE_FULL) {
            rd_kafka_poll(rk, 1);
        } else {
            fprintf(stderr, "produce: %s\n", rd_kafka_err2str(rd_kafka_last_error()));
            return 1;
        }
    }
    while (delivered + failed < count && now() < deadline)
        rd_kafka_poll(rk, 10);
    double seconds = now() - start;
    printf("{\"records\": %lld, \"bytes\": %lld, \"seconds\": %.6f, \"errors\": %lld}\n",
           delivered, delivered * size, seconds, failed);
    rd_kafka_topic_destroy(rkt);
    rd_kafka_destroy(rk);
    free(payload);
    return failed ? 1 : 0;
}

static int consume(const char *bootstrap, const char *topic, long long count)
{
    char err[512];
    rd_kafka_conf_t *conf = config(bootstrap);
    set(conf, "fetch.message.max.bytes", "52428800");
    set(conf, "fetch.max.bytes", "104857600");
    set(conf, "queued.max.messages.kbytes", "2097151");
    set(conf, "fetch.wait.max.ms", "100");
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, err, sizeof err);
    if (!rk) { fprintf(stderr, "%s\n", err); return 2; }
    rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, topic, NULL);
    double start = now(), deadline = start + MAX_SECONDS;
    if (rd_kafka_consume_start(rkt, 0, RD_KAFKA_OFFSET_BEGINNING) == -1) {
        fprintf(stderr, "consume_start: %s\n", rd_kafka_err2str(rd_kafka_last_error()));
        return 1;
    }
    rd_kafka_message_t *batch[10000];
    long long got = 0, bytes = 0;
    /* timed from the first record: before it, librdkafka's legacy consumer sits out its own
     * 500 ms offset-query timer, which says nothing about the broker */
    double first = 0;
    while (got < count && now() < deadline) {
        /* ask only for what is missing: a batch call waits until it is full or times out */
        size_t want = count - got < 10000 ? (size_t)(count - got) : 10000;
        ssize_t n = rd_kafka_consume_batch(rkt, 0, 100, batch, want);
        for (ssize_t i = 0; i < n; i++) {
            if (!batch[i]->err) {
                if (!got) first = now();
                got++;
                bytes += batch[i]->len;
            }
            rd_kafka_message_destroy(batch[i]);
        }
    }
    double seconds = now() - (first ? first : start);
    rd_kafka_consume_stop(rkt, 0);
    printf("{\"records\": %lld, \"bytes\": %lld, \"seconds\": %.6f, \"errors\": 0}\n", got, bytes, seconds);
    rd_kafka_topic_destroy(rkt);
    rd_kafka_destroy(rk);
    return got < count;
}

int main(int argc, char **argv)
{
    if (argc >= 7 && !strcmp(argv[1], "produce"))
        return produce(argv[2], argv[3], atoll(argv[4]), atoi(argv[5]), argv[6]);
    if (argc >= 5 && !strcmp(argv[1], "consume"))
        return consume(argv[2], argv[3], atoll(argv[4]));
    fprintf(stderr, "usage: rdkafka_load produce BOOTSTRAP TOPIC COUNT SIZE ACKS | consume BOOTSTRAP TOPIC COUNT\n");
    return 2;
}
