/* sklode: the CVODES solve of any model, compiled once at install (no compiler at run time).
 *
 * The model is not C here but a program of instructions (sklode/models/_tape.py encodes it
 * from the same assignments the per-model C is written from): each instruction reads one to
 * three registers and writes one, the registers holding t, x, theta, the constants and every
 * assigned value. The solve below is the same driver as the per-model build
 * (_cvodes_driver.c, included after the definitions it expects), its sizes read from the
 * model given to sklode_tape_solve, as CasADi's SX virtual machine evaluates an expression
 * graph without compiling it.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#ifdef SKLODE_HAVE_KLU  /* before the size macros below: its matrix has a field named NP */
#include <sunmatrix/sunmatrix_sparse.h>
#include <sunlinsol/sunlinsol_klu.h>
#endif

/* The instruction set, in the order of sklode.models._program.OPERATIONS (the loader
 * compares the two through sklode_tape_operations). */
enum {
    OP_ADD, OP_SUB, OP_MUL, OP_DIV, OP_GT, OP_LT, OP_GE, OP_LE, OP_EQ, OP_NE,
    OP_EXP, OP_LOG, OP_SIN, OP_COS, OP_TAN, OP_TANH, OP_SINH, OP_COSH, OP_SQRT, OP_FABS,
    OP_LOG1P, OP_EXPM1, OP_ATAN, OP_ASIN, OP_ACOS, OP_FLOOR, OP_CEIL, OP_POW, OP_FMAX, OP_FMIN,
    OP_NEG, OP_SIGN, OP_SELECT, OP_AND, OP_SWITCH
};
static const char OPERATIONS[] =
    "add,sub,mul,div,gt,lt,ge,le,eq,ne,exp,log,sin,cos,tan,tanh,sinh,cosh,sqrt,fabs,"
    "log1p,expm1,atan,asin,acos,floor,ceil,pow,fmax,fmin,neg,sign,select,and,switch";

/* A model as instructions, five ints each: the operation, the register it writes, its first
 * and second operands, and a select's third operand or a switch's index. Registers: 0 is t,
 * then x, theta, the constants, then every value and derivative the program assigns. */
typedef struct {
    int nx, np, nroots, nnz_x, nnz_p, band_lower, band_upper, n_registers;
    int sparse, csc_nnz;  /* KLU on df/dx's compressed columns (csc_*), or the dense LU */
    const int *pos;  /* the states' order in the LU, or NULL: natural */
    const int *jx_row, *jx_col, *jp_row, *jp_col;
    const int *csc_start, *csc_row, *csc_slot;
    const double *switch_above, *switch_below;
    const double *registers;  /* the register file's start: the constants in place */
    int n_value, n_root_value, n_jx, n_jp, n_root;
    const int *value, *jx, *jp, *root;  /* 5 ints per instruction */
    const int *f_out, *jx_out, *jp_out, *g_out, *sw_out;
    int nevents, n_event;  /* the events' triggers: their instructions and outputs */
    const int *event, *e_out;
} sk_tape;

/* The model and the register file of the solve running on this thread. */
#if defined(_MSC_VER)
static __declspec(thread) const sk_tape *M_;
static __declspec(thread) double *R_;
#else
static __thread const sk_tape *M_;
static __thread double *R_;
#endif

static void run(const int *code, int n, double *r, const double *sw) {
    for (const int *end = code + 5 * (long)n; code < end; code += 5) {
        const double a = r[code[2]], b = r[code[3]];
        double v;
        switch (code[0]) {
        case OP_ADD: v = a + b; break;
        case OP_SUB: v = a - b; break;
        case OP_MUL: v = a * b; break;
        case OP_DIV: v = a / b; break;
        case OP_GT: v = a > b ? 1.0 : 0.0; break;
        case OP_LT: v = a < b ? 1.0 : 0.0; break;
        case OP_GE: v = a >= b ? 1.0 : 0.0; break;
        case OP_LE: v = a <= b ? 1.0 : 0.0; break;
        case OP_EQ: v = a == b ? 1.0 : 0.0; break;
        case OP_NE: v = a != b ? 1.0 : 0.0; break;
        case OP_EXP: v = exp(a); break;
        case OP_LOG: v = log(a); break;
        case OP_SIN: v = sin(a); break;
        case OP_COS: v = cos(a); break;
        case OP_TAN: v = tan(a); break;
        case OP_TANH: v = tanh(a); break;
        case OP_SINH: v = sinh(a); break;
        case OP_COSH: v = cosh(a); break;
        case OP_SQRT: v = sqrt(a); break;
        case OP_FABS: v = fabs(a); break;
        case OP_LOG1P: v = log1p(a); break;
        case OP_EXPM1: v = expm1(a); break;
        case OP_ATAN: v = atan(a); break;
        case OP_ASIN: v = asin(a); break;
        case OP_ACOS: v = acos(a); break;
        case OP_FLOOR: v = floor(a); break;
        case OP_CEIL: v = ceil(a); break;
        case OP_POW: v = pow(a, b); break;
        case OP_FMAX: v = fmax(a, b); break;
        case OP_FMIN: v = fmin(a, b); break;
        case OP_NEG: v = -a; break;
        case OP_SIGN: v = (double)((a > 0.0) - (a < 0.0)); break;
        case OP_SELECT: v = a != 0.0 ? b : r[code[4]]; break;
        case OP_AND: v = (a != 0.0 && b != 0.0) ? 1.0 : 0.0; break;
        case OP_SWITCH: v = sw ? sw[code[4]] : a; break;
        default: v = NAN;
        }
        r[code[1]] = v;
    }
}

static void load(double t, const double *x, const double *p) {
    R_[0] = t;
    memcpy(R_ + 1, x, sizeof(double) * M_->nx);
    memcpy(R_ + 1 + M_->nx, p, sizeof(double) * M_->np);
}

static void model_f(double t, const double *x, const double *p, const double *sw, double *dx) {
    load(t, x, p);
    run(M_->value, M_->n_value, R_, sw);
    for (int i = 0; i < M_->nx; i++) dx[i] = R_[M_->f_out[i]];
}

static void model_jx(double t, const double *x, const double *p, const double *sw, double *jx) {
    load(t, x, p);
    run(M_->value, M_->n_value, R_, sw);
    run(M_->jx, M_->n_jx, R_, sw);
    for (int k = 0; k < M_->nnz_x; k++) jx[k] = R_[M_->jx_out[k]];
}

static void model_jp(double t, const double *x, const double *p, const double *sw, double *jp) {
    load(t, x, p);
    run(M_->value, M_->n_value, R_, sw);
    run(M_->jp, M_->n_jp, R_, sw);
    for (int k = 0; k < M_->nnz_p; k++) jp[k] = R_[M_->jp_out[k]];
}

/* The switching functions and the switches' values read from t and x (no sw): only the
 * value instructions they need. */
static void model_roots(double t, const double *x, const double *p, double *g) {
    load(t, x, p);
    run(M_->value, M_->n_root_value, R_, NULL);
    run(M_->root, M_->n_root, R_, NULL);
    for (int i = 0; i < M_->nroots; i++) g[i] = R_[M_->g_out[i]];
}

/* The events' trigger functions (model.events), read from t and x. */
static void model_event_values(double t, const double *x, const double *p, double *g) {
    load(t, x, p);
    run(M_->event, M_->n_event, R_, NULL);
    for (int i = 0; i < M_->nevents; i++) g[i] = R_[M_->e_out[i]];
}

static void model_switches(double t, const double *x, const double *p, double *value) {
    load(t, x, p);
    run(M_->value, M_->n_root_value, R_, NULL);
    for (int i = 0; i < M_->nroots; i++) value[i] = R_[M_->sw_out[i]];
}

#define NX (M_->nx)
#define NP (M_->np)
#define NNZ_X (M_->nnz_x)
#define NNZ_P (M_->nnz_p)
#define JX_ROW (M_->jx_row)
#define JX_COL (M_->jx_col)
#define JP_ROW (M_->jp_row)
#define JP_COL (M_->jp_col)
#define BAND_LOWER (M_->band_lower)
#define BAND_UPPER (M_->band_upper)
#define HAS_PERM (M_->pos != NULL)
#define POS (M_->pos)
#define SPARSE (M_->sparse)
#define CSC_NNZ (M_->csc_nnz)
#define CSC_START (M_->csc_start)
#define CSC_ROW (M_->csc_row)
#define CSC_SLOT (M_->csc_slot)
#define NROOTS (M_->nroots)
#define NEVENTS (M_->nevents)
#define SWITCH_ABOVE (M_->switch_above)
#define SWITCH_BELOW (M_->switch_below)
#define SKLODE_ENTRY static
#define sklode_solve driver_solve
#define sklode_evaluate driver_evaluate
#define sklode_adjoint driver_adjoint
#define sklode_locate driver_locate
#define sklode_event_values driver_event_values
#include "_cvodes_driver.c"
#undef sklode_solve
#undef sklode_evaluate
#undef sklode_adjoint
#undef sklode_locate
#undef sklode_event_values

SKLODE_EXPORT const char *sklode_tape_operations(void) { return OPERATIONS; }

/* The SHA-256 of this file and _cvodes_driver.c it was built from (the install passes it):
 * sklode refuses a library built from other sources than the ones it ships. */
#ifndef SKLODE_TAPE_SOURCE
#define SKLODE_TAPE_SOURCE "unknown"
#endif
SKLODE_EXPORT const char *sklode_tape_source(void) { return SKLODE_TAPE_SOURCE; }

/* Point this thread at the model and a register file of its own for one call. */
static double *enter(const sk_tape *tape, const sk_tape **saved_model, double **saved_registers) {
    double *registers = (double *)malloc(sizeof(double) * (size_t)tape->n_registers);
    if (!registers) return NULL;
    memcpy(registers, tape->registers, sizeof(double) * (size_t)tape->n_registers);
    *saved_model = M_;
    *saved_registers = R_;
    M_ = tape;
    R_ = registers;
    return registers;
}

static void leave(double *registers, const sk_tape *saved_model, double *saved_registers) {
    free(registers);
    M_ = saved_model;
    R_ = saved_registers;
}

/* sklode_solve of _cvodes_driver.c, for the model `tape`. */
SKLODE_EXPORT int sklode_tape_solve(const sk_tape *tape, double t0, const double *x0,
                                    const double *p, int n_times, const double *times,
                                    double rtol, const double *atol, long max_steps,
                                    double blowup, int n_sens, const int *sens_param,
                                    const double *s0, double *out, double *sens_out,
                                    double *info, int n_doses, const double *dose_times,
                                    const int *dose_states, const double *dose_amounts) {
    const sk_tape *saved_model;
    double *saved_registers;
    double *registers = enter(tape, &saved_model, &saved_registers);
    int flag;
    if (!registers) return CV_MEM_FAIL;
    flag = driver_solve(t0, x0, p, n_times, times, rtol, atol, max_steps, blowup, n_sens,
                        sens_param, s0, out, sens_out, info, n_doses, dose_times,
                        dose_states, dose_amounts);
    leave(registers, saved_model, saved_registers);
    return flag;
}

/* sklode_adjoint of _cvodes_driver.c, for the model `tape`. */
SKLODE_EXPORT int sklode_tape_adjoint(const sk_tape *tape, double t0, const double *x0,
                                      const double *p, int n_times, const double *times,
                                      double rtol, const double *atol, long max_steps,
                                      double blowup, const double *jumps, double *out,
                                      double *grad_x0, double *grad_p, double *info) {
    const sk_tape *saved_model;
    double *saved_registers;
    double *registers = enter(tape, &saved_model, &saved_registers);
    int flag;
    if (!registers) return CV_MEM_FAIL;
    flag = driver_adjoint(t0, x0, p, n_times, times, rtol, atol, max_steps, blowup, jumps,
                          out, grad_x0, grad_p, info);
    leave(registers, saved_model, saved_registers);
    return flag;
}

/* sklode_locate of _cvodes_driver.c, for the model `tape`. */
SKLODE_EXPORT int sklode_tape_locate(const sk_tape *tape, double t0, const double *x0,
                                     const double *p, double t_end, double rtol,
                                     const double *atol, long max_steps, double blowup,
                                     double *stop, double *fired, double *info) {
    const sk_tape *saved_model;
    double *saved_registers;
    double *registers = enter(tape, &saved_model, &saved_registers);
    int flag;
    if (!registers) return CV_MEM_FAIL;
    flag = driver_locate(t0, x0, p, t_end, rtol, atol, max_steps, blowup, stop, fired, info);
    leave(registers, saved_model, saved_registers);
    return flag;
}

/* sklode_event_values of _cvodes_driver.c, for the model `tape`. */
SKLODE_EXPORT void sklode_tape_event_values(const sk_tape *tape, double t, const double *x,
                                            const double *p, double *g) {
    const sk_tape *saved_model;
    double *saved_registers;
    double *registers = enter(tape, &saved_model, &saved_registers);
    if (!registers) return;
    driver_event_values(t, x, p, g);
    leave(registers, saved_model, saved_registers);
}

/* sklode_evaluate of _cvodes_driver.c, for the model `tape`. */
SKLODE_EXPORT void sklode_tape_evaluate(const sk_tape *tape, double t, const double *x,
                                        const double *p, double *dx, double *jx, double *jp) {
    const sk_tape *saved_model;
    double *saved_registers;
    double *registers = enter(tape, &saved_model, &saved_registers);
    if (!registers) return;
    driver_evaluate(t, x, p, dx, jx, jp);
    leave(registers, saved_model, saved_registers);
}
