/* See idle_worker.h. */
#define _GNU_SOURCE /* SCHED_IDLE */
#include "idle_worker.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>

enum { IDLE_STARTING, IDLE_WAITING, IDLE_JOB, IDLE_DONE, IDLE_EXIT };

typedef struct {
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    void (*fn)(void *);
    void *arg;
    int state;
} idle_helper;

static __thread idle_helper *pb_idle_self = NULL;

static void *idle_main(void *p) {
    idle_helper *h = p;
#ifdef SCHED_IDLE
    struct sched_param param = {0};
    (void)sched_setscheduler(0, SCHED_IDLE, &param); /* needs no privilege; else it runs at normal priority */
#endif
    pthread_mutex_lock(&h->lock);
    h->state = IDLE_WAITING;
    pthread_cond_broadcast(&h->cond);
    for (;;) {
        while (h->state != IDLE_JOB && h->state != IDLE_EXIT)
            pthread_cond_wait(&h->cond, &h->lock);
        if (h->state == IDLE_EXIT)
            break;
        pthread_mutex_unlock(&h->lock);
        h->fn(h->arg);
        pthread_mutex_lock(&h->lock);
        h->state = IDLE_DONE;
        pthread_cond_broadcast(&h->cond);
    }
    pthread_mutex_unlock(&h->lock);
    return NULL;
}

int pb_idle_start(void) {
    if (pb_idle_self != NULL)
        return 0;
    idle_helper *h = calloc(1, sizeof(*h));
    if (h == NULL)
        return ENOMEM;
    pthread_mutex_init(&h->lock, NULL);
    pthread_cond_init(&h->cond, NULL);
    h->state = IDLE_STARTING;
    /* signals stay with the interpreter's threads: the helper starts with all of them blocked */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int err = pthread_create(&h->thread, NULL, idle_main, h);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (err != 0) {
        pthread_cond_destroy(&h->cond);
        pthread_mutex_destroy(&h->lock);
        free(h);
        return err;
    }
    pthread_mutex_lock(&h->lock); /* returns once the helper has lowered its priority */
    while (h->state == IDLE_STARTING)
        pthread_cond_wait(&h->cond, &h->lock);
    pthread_mutex_unlock(&h->lock);
    pb_idle_self = h;
    return 0;
}

void pb_idle_run(void (*fn)(void *), void *arg) {
    idle_helper *h = pb_idle_self;
    if (h == NULL) {
        fn(arg);
        return;
    }
    pthread_mutex_lock(&h->lock);
    h->fn = fn;
    h->arg = arg;
    h->state = IDLE_JOB;
    pthread_cond_broadcast(&h->cond);
    while (h->state != IDLE_DONE)
        pthread_cond_wait(&h->cond, &h->lock);
    h->state = IDLE_WAITING;
    pthread_mutex_unlock(&h->lock);
}

void pb_idle_stop(void) {
    idle_helper *h = pb_idle_self;
    if (h == NULL)
        return;
    pb_idle_self = NULL;
    pthread_mutex_lock(&h->lock);
    h->state = IDLE_EXIT;
    pthread_cond_broadcast(&h->cond);
    pthread_mutex_unlock(&h->lock);
    pthread_join(h->thread, NULL);
    pthread_cond_destroy(&h->cond);
    pthread_mutex_destroy(&h->lock);
    free(h);
}
