#ifndef PB_IDLE_WORKER_H
#define PB_IDLE_WORKER_H

/* Background CPU work at the lowest priority without a priority inversion on the GIL.
 *
 * A thread that lowers its own priority (SCHED_IDLE, nice 19) and then holds the GIL can be kept
 * off the CPU by any busy process while the request-serving thread waits for that GIL. So the
 * calling thread keeps its priority, and only GIL-free C work runs at SCHED_IDLE: on a helper
 * thread that belongs to the calling thread, never touches Python, and is handed one job at a time.
 *
 * pb_idle_start():  this thread's later pb_idle_run calls go to its helper (created here); 0 or errno.
 * pb_idle_run(f,a): f(a) on this thread's helper, waiting for it; inline when it has none.
 * pb_idle_stop():   ends this thread's helper, if any. */
int pb_idle_start(void);
void pb_idle_run(void (*fn)(void *), void *arg);
void pb_idle_stop(void);

#endif
