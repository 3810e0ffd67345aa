/* Unwinding through hooked x86 frames, included by pd_func.c: the hooked return
 * address is the word at the entry's stack pointer (func.h), so the real one goes back
 * there, and pd_ret_tramp comes back after. */
void pd_shadow_unhook(uintptr_t cfa)
{
    PD_THR(t);
    pd_shadow_drop_dead(t, cfa);
    for (uint32_t i = 0; i < t->n; i++) {
        pd_ureg *slot = (pd_ureg *)t->stk[i].at;
        if (*slot == (pd_ureg)(uintptr_t)pd_ret_tramp)
            *slot = (pd_ureg)t->stk[i].ret;
    }
}

/* After the unwinder is done (a catch has begun, a backtrace returned): the frames
 * still live return through pd_ret_tramp again. */
void pd_shadow_rehook(uintptr_t cfa)
{
    PD_THR(t);
    pd_shadow_drop_dead(t, cfa);
    for (uint32_t i = 0; i < t->n; i++) {
        pd_ureg *slot = (pd_ureg *)t->stk[i].at;
        if (*slot == (pd_ureg)t->stk[i].ret)
            *slot = (pd_ureg)(uintptr_t)pd_ret_tramp;
    }
}

/* At the detach of a -x process, every other thread stopped: each thread's hooked
 * frames get their real return addresses, so an exception or backtrace through one
 * later needs no wrapper (the GOT is the process's own again).  Returns them counted. */
uint32_t pd_shadow_unhook_all(void)
{
    uint32_t n = 0;
    for (uint32_t k = 0; k < PD_THREADS_MAX; k++) {
        struct pd_thread *t = __atomic_load_n(&pd_threads[k], __ATOMIC_ACQUIRE);
        for (uint32_t i = 0; t && t->stk && i < t->n; i++) {
            pd_ureg *slot = (pd_ureg *)t->stk[i].at;
            if (*slot == (pd_ureg)(uintptr_t)pd_ret_tramp) {
                *slot = (pd_ureg)t->stk[i].ret;
                n++;
            }
        }
    }
    return n;
}
