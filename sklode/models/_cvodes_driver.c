/* sklode: one forward solve (and forward sensitivities) of a compiled model with CVODES.
 *
 * The model part (NX, NP, model_f, model_jx, model_jp and the sparsity of the two
 * Jacobians; NEVENTS and model_event_values, the triggers of the model's events) comes
 * before this file: either generated as C from the recorded torch program
 * (sklode/models/_program.py), its sizes then constants, or the interpreter of that program's
 * instructions (_tape_model.c, compiled once at install), its sizes read from the model
 * given to the solve. This part is the same for every model, and so uses no array sized by
 * the model and no preprocessor test of its sizes.
 *
 * CVODES (SUNDIALS) integrates with BDF and a Newton solver on the generated Jacobian (a
 * dense or banded LU here, or SuiteSparse's KLU on its nonzero entries where the model asks
 * for it: SPARSE), and the forward sensitivities s_j' = J_x s_j + df/dtheta_j with the
 * staggered corrector, their errors controlled like the state's: the same method AMICI uses
 * by default.
 */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <cvodes/cvodes.h>
#include <nvector/nvector_serial.h>
#include <sunmatrix/sunmatrix_dense.h>
#include <sunlinsol/sunlinsol_dense.h>
#include <sundials/sundials_config.h>
#ifdef SKLODE_HAVE_KLU  /* the package's SUNDIALS has KLU built in; another may not */
#include <sunmatrix/sunmatrix_sparse.h>
#include <sunlinsol/sunlinsol_klu.h>
#endif
#ifndef SPARSE
#define SPARSE 0
#endif

#if defined(_WIN32)
#define SKLODE_EXPORT __declspec(dllexport)
#else
#define SKLODE_EXPORT __attribute__((visibility("default")))
#endif
#ifndef SKLODE_ENTRY
#define SKLODE_ENTRY SKLODE_EXPORT
#endif

/* What the solve reports back through info[] (then, from info[INFO_SIZE], the NX values of
 * the last state where the field was not finite): */
enum { INFO_T_REACHED, INFO_N_RHS, INFO_N_STEPS, INFO_FAILURE, INFO_SIZE };
/* Failure kinds (info[INFO_FAILURE]): */
enum { OK = 0, BLOWUP = 1, NONFINITE = 2, CVODES_FAILED = 3 };

typedef struct {
    const double *p;
    double blowup;         /* a state norm above this is a blow-up */
    double t_last;         /* last time the field was evaluated */
    long n_rhs;
    int failure;
    int n_sens;
    const int *sens_param; /* column j of S differentiates theta[sens_param[j]] (or x0: -1) */
    double *x_nonfinite;   /* where the last non-finite field was met (info + INFO_SIZE) */
    /* one allocation, the model's sizes: */
    double *jx, *jp;       /* the nonzero entries of df/dx and df/dtheta */
    double *column;        /* df/dtheta_k as dense columns (NP x NX), for the sens rhs */
    double *sw;            /* the switches' values (model_switches) */
    double *g, *g_later, *direct, *dx, *x_later, *perm_work;  /* scratch */
    int *found;            /* the roots CVODES found */
} UserData;

static void free_work(UserData *u) {
    free(u->jx);
    free(u->found);
}

static int alloc_work(UserData *u) {
    long roots = NROOTS + NEVENTS > 0 ? NROOTS + NEVENTS : 1;
    long size = (NNZ_X > 0 ? NNZ_X : 1) + (NNZ_P > 0 ? NNZ_P : 1) + (long)(NP > 0 ? NP : 1) * NX
                + 4 * roots + 3 * (long)NX;
    double *work = (double *)calloc((size_t)size, sizeof(double));
    u->found = (int *)calloc((size_t)roots, sizeof(int));
    if (!work || !u->found) { free(work); free(u->found); u->jx = NULL; u->found = NULL; return -1; }
    u->jx = work; work += NNZ_X > 0 ? NNZ_X : 1;
    u->jp = work; work += NNZ_P > 0 ? NNZ_P : 1;
    u->column = work; work += (long)(NP > 0 ? NP : 1) * NX;
    u->sw = work; work += roots;
    u->g = work; work += roots;
    u->g_later = work; work += roots;
    u->direct = work; work += roots;
    u->dx = work; work += NX;
    u->x_later = work; work += NX;
    u->perm_work = work;
    return 0;
}

/* The LU's permuted right-hand side (ls_solve has no user data): the solve's own. */
#if defined(_MSC_VER)
static __declspec(thread) double *perm_work;
#else
static __thread double *perm_work;
#endif

static int rhs(sunrealtype t, N_Vector y, N_Vector ydot, void *user_data) {
    UserData *u = (UserData *)user_data;
    const double *x = N_VGetArrayPointer(y);
    double *dx = N_VGetArrayPointer(ydot);
    double norm2 = 0.0;
    u->t_last = t;
    u->n_rhs++;
    for (int i = 0; i < NX; i++) norm2 += x[i] * x[i];
    if (norm2 > u->blowup * u->blowup) { u->failure = BLOWUP; return -1; }
    model_f(t, x, u->p, u->sw, dx);
    for (int i = 0; i < NX; i++) {
        if (!isfinite(dx[i])) {  /* recoverable: CVODES retries with a shorter step */
            u->failure = NONFINITE;
            memcpy(u->x_nonfinite, x, sizeof(double) * NX);
            return 1;
        }
    }
    u->failure = OK;
    return 0;
}

/* With HAS_PERM the LU's matrix has state i in row and column POS[i] (the order in which
 * the band is narrowest: a ring such as Lorenz-96 is dense in its natural order). */
#ifndef HAS_PERM
#define HAS_PERM 0
#endif
#define LU_INDEX(i) (HAS_PERM ? POS[i] : (i))
static int jac(sunrealtype t, N_Vector y, N_Vector fy, SUNMatrix J, void *user_data,
               N_Vector tmp1, N_Vector tmp2, N_Vector tmp3) {
    UserData *u = (UserData *)user_data;
    (void)fy; (void)tmp1; (void)tmp2; (void)tmp3;
    model_jx(t, N_VGetArrayPointer(y), u->p, u->sw, u->jx);
#ifdef SKLODE_HAVE_KLU
    if (SPARSE) {
        /* compressed columns: the structural entries and the diagonal (I - gamma J is
         * formed in place only where every diagonal entry is stored). SUNDIALS' own
         * SUNMatZero clears the pattern too, so it is written whole each time. */
        sunindextype *start = SUNSparseMatrix_IndexPointers(J);
        sunindextype *row = SUNSparseMatrix_IndexValues(J);
        double *data = SUNSparseMatrix_Data(J);
        for (int j = 0; j <= NX; j++) start[j] = CSC_START[j];
        for (int k = 0; k < CSC_NNZ; k++) { row[k] = CSC_ROW[k]; data[k] = 0.0; }
        for (int k = 0; k < NNZ_X; k++) data[CSC_SLOT[k]] = u->jx[k];
        return 0;
    }
#endif
    SUNMatZero(J);
    for (int k = 0; k < NNZ_X; k++)
        SM_ELEMENT_D(J, LU_INDEX(JX_ROW[k]), LU_INDEX(JX_COL[k])) = u->jx[k];
    return 0;
}

static int sens_rhs(int n_sens, sunrealtype t, N_Vector y, N_Vector ydot, N_Vector *yS,
                    N_Vector *ySdot, void *user_data, N_Vector tmp1, N_Vector tmp2) {
    UserData *u = (UserData *)user_data;
    const double *x = N_VGetArrayPointer(y);
    (void)ydot; (void)tmp1; (void)tmp2;
    model_jx(t, x, u->p, u->sw, u->jx);
    model_jp(t, x, u->p, u->sw, u->jp);
    for (int k = 0; k < NNZ_P; k++) u->column[(long)JP_COL[k] * NX + JP_ROW[k]] = u->jp[k];
    for (int j = 0; j < n_sens; j++) {
        const double *s = N_VGetArrayPointer(yS[j]);
        double *ds = N_VGetArrayPointer(ySdot[j]);
        int k_param = u->sens_param[j];
        if (k_param >= 0) memcpy(ds, u->column + (long)k_param * NX, sizeof(double) * NX);
        else memset(ds, 0, sizeof(double) * NX);
        for (int k = 0; k < NNZ_X; k++) ds[JX_ROW[k]] += u->jx[k] * s[JX_COL[k]];
    }
    return 0;
}

/* The switches' values just past (t, x) in the direction of the solve: from the sign of each
 * switching function g there, or, where g is exactly zero (a dose at the start time, a root
 * CVODES returns on its zero), from its sign a few rounding errors later along the field.
 * CVODES's own direction (rootsfound) is not used alone: for a g that is zero where a solve
 * starts it reports the wrong one (Weber et al. 2015, a dose at t0 = 24 read as undone at
 * rtol 1e-12). Where g stays zero, `fallback` (+1/-1) or, if 0, the comparison at (t, x).
 * Only the switches with which[i] != 0 change (NULL: all). */
static void settle_switches(UserData *u, double t, const double *x, const int *which,
                            const int *fallback) {
    const double *p = u->p;
    double *sw = u->sw, *g = u->g, *g_later = u->g_later, *dx = u->dx, *x_later = u->x_later,
           *direct = u->direct;
    double dt = 1e3 * DBL_EPSILON * fmax(1.0, fabs(t));
    model_roots(t, x, p, g);
    model_f(t, x, p, sw, dx);
    for (int i = 0; i < NX; i++) x_later[i] = x[i] + dt * dx[i];
    model_roots(t + dt, x_later, p, g_later);
    model_switches(t, x, p, direct);
    for (int i = 0; i < NROOTS; i++) {
        if (which && !which[i]) continue;
        double side = g[i] != 0.0 ? g[i] : g_later[i];
        if (side == 0.0 && fallback) side = fallback[i];
        sw[i] = side > 0.0 ? SWITCH_ABOVE[i] : side < 0.0 ? SWITCH_BELOW[i] : direct[i];
    }
}

/* Where a comparison in the field between values that change along the solution (a dose
 * switched on at a time, a threshold of a state) changes sign, CVODES stops, the switch
 * takes its new value and the solve restarts from there. The field reads the switches from
 * u->sw, not from t and x, so the steps that find the root integrate one smooth field. */
static int roots(sunrealtype t, N_Vector y, sunrealtype *g, void *user_data) {
    UserData *u = (UserData *)user_data;
    model_roots(t, N_VGetArrayPointer(y), u->p, g);
    return 0;
}

/* ----------------------------------------------------------------------------------------
 * The vector operations and the dense LU, compiled here with the model.
 *
 * Debian's and Ubuntu's SUNDIALS (libsundials-dev 6.4.1) is built without optimisation:
 * its serial vector operations and dense LU took three quarters of a solve (Raia's four
 * conditions: 9.4 ms against 2.4 ms for the same 2,178 steps linked against AMICI's build).
 * The operation tables of the serial N_Vector, the dense SUNMatrix and the dense
 * SUNLinearSolver are SUNDIALS' public extension points; the loops below replace the ones a
 * step calls, with the same arithmetic in the same order, so that the integrator's own
 * build no longer decides the speed of a solve.
 * ------------------------------------------------------------------------------------- */
#define LEN(v) ((long)NV_LENGTH_S(v))
#define DAT(v) NV_DATA_S(v)

static void v_linearsum(sunrealtype a, N_Vector x, sunrealtype b, N_Vector y, N_Vector z) {
    const double *xd = DAT(x), *yd = DAT(y);
    double *zd = DAT(z);
    /* SUNDIALS' serial vector computes a (x + y) when a = b and a (x - y) when a = -b (not
     * a x + b y, which differs in the last bit): the same here, so that a solve is the
     * same to the bit whichever build of SUNDIALS it links against. (Its other special
     * cases, a or b = 1 or -1, give a x + b y exactly.) */
    if (a == b && !(a == 1.0 || a == -1.0)) {
        for (long i = 0; i < LEN(z); i++) zd[i] = a * (xd[i] + yd[i]);
    } else if (a == -b && !(a == 1.0 || a == -1.0)) {
        for (long i = 0; i < LEN(z); i++) zd[i] = a * (xd[i] - yd[i]);
    } else {
        for (long i = 0; i < LEN(z); i++) zd[i] = a * xd[i] + b * yd[i];
    }
}
static void v_const(sunrealtype c, N_Vector z) {
    double *zd = DAT(z);
    for (long i = 0; i < LEN(z); i++) zd[i] = c;
}
static void v_prod(N_Vector x, N_Vector y, N_Vector z) {
    const double *xd = DAT(x), *yd = DAT(y);
    double *zd = DAT(z);
    for (long i = 0; i < LEN(z); i++) zd[i] = xd[i] * yd[i];
}
static void v_div(N_Vector x, N_Vector y, N_Vector z) {
    const double *xd = DAT(x), *yd = DAT(y);
    double *zd = DAT(z);
    for (long i = 0; i < LEN(z); i++) zd[i] = xd[i] / yd[i];
}
static void v_scale(sunrealtype c, N_Vector x, N_Vector z) {
    const double *xd = DAT(x);
    double *zd = DAT(z);
    for (long i = 0; i < LEN(z); i++) zd[i] = c * xd[i];
}
static void v_abs(N_Vector x, N_Vector z) {
    const double *xd = DAT(x);
    double *zd = DAT(z);
    for (long i = 0; i < LEN(z); i++) zd[i] = fabs(xd[i]);
}
static void v_inv(N_Vector x, N_Vector z) {
    const double *xd = DAT(x);
    double *zd = DAT(z);
    for (long i = 0; i < LEN(z); i++) zd[i] = 1.0 / xd[i];
}
static void v_addconst(N_Vector x, sunrealtype b, N_Vector z) {
    const double *xd = DAT(x);
    double *zd = DAT(z);
    for (long i = 0; i < LEN(z); i++) zd[i] = xd[i] + b;
}
static sunrealtype v_maxnorm(N_Vector x) {
    const double *xd = DAT(x);
    double m = 0.0;
    for (long i = 0; i < LEN(x); i++) if (fabs(xd[i]) > m) m = fabs(xd[i]);
    return m;
}
static sunrealtype v_wsqrsum(N_Vector x, N_Vector w) {
    const double *xd = DAT(x), *wd = DAT(w);
    double sum = 0.0;
    for (long i = 0; i < LEN(x); i++) { double p = xd[i] * wd[i]; sum += p * p; }
    return sum;
}
static sunrealtype v_wrmsnorm(N_Vector x, N_Vector w) {
    return sqrt(v_wsqrsum(x, w) / (double)LEN(x));
}
static sunrealtype v_min(N_Vector x) {
    const double *xd = DAT(x);
    double m = xd[0];
    for (long i = 1; i < LEN(x); i++) if (xd[i] < m) m = xd[i];
    return m;
}
static int v_linearcombination(int n, sunrealtype *c, N_Vector *X, N_Vector z) {
    double *zd = DAT(z);
    long len = LEN(z);
    const double *x0 = DAT(X[0]);
    if (X[0] == z) {  /* z = c0 z + sum c_k X_k, in place */
        if (c[0] != 1.0) for (long i = 0; i < len; i++) zd[i] *= c[0];
    } else {
        for (long i = 0; i < len; i++) zd[i] = c[0] * x0[i];
    }
    for (int k = 1; k < n; k++) {
        const double *xd = DAT(X[k]);
        for (long i = 0; i < len; i++) zd[i] += c[k] * xd[i];
    }
    return 0;
}
static int v_scaleaddmulti(int n, sunrealtype *a, N_Vector x, N_Vector *Y, N_Vector *Z) {
    const double *xd = DAT(x);
    for (int k = 0; k < n; k++) {
        const double *yd = DAT(Y[k]);
        double *zd = DAT(Z[k]);
        for (long i = 0; i < LEN(x); i++) zd[i] = a[k] * xd[i] + yd[i];
    }
    return 0;
}
static int v_linearsumvectorarray(int n, sunrealtype a, N_Vector *X, sunrealtype b,
                                  N_Vector *Y, N_Vector *Z) {
    for (int k = 0; k < n; k++) v_linearsum(a, X[k], b, Y[k], Z[k]);
    return 0;
}
static int v_scalevectorarray(int n, sunrealtype *c, N_Vector *X, N_Vector *Z) {
    for (int k = 0; k < n; k++) v_scale(c[k], X[k], Z[k]);
    return 0;
}
static int v_constvectorarray(int n, sunrealtype c, N_Vector *Z) {
    for (int k = 0; k < n; k++) v_const(c, Z[k]);
    return 0;
}
static int v_wrmsnormvectorarray(int n, N_Vector *X, N_Vector *W, sunrealtype *norms) {
    for (int k = 0; k < n; k++) norms[k] = v_wrmsnorm(X[k], W[k]);
    return 0;
}
static int v_scaleaddmultivectorarray(int n_vec, int n_sum, sunrealtype *a, N_Vector *X,
                                      N_Vector **Y, N_Vector **Z) {
    N_Vector y_column[n_sum > 0 ? n_sum : 1], z_column[n_sum > 0 ? n_sum : 1];
    for (int j = 0; j < n_vec; j++) {
        for (int k = 0; k < n_sum; k++) { y_column[k] = Y[k][j]; z_column[k] = Z[k][j]; }
        v_scaleaddmulti(n_sum, a, X[j], y_column, z_column);
    }
    return 0;
}
static int v_linearcombinationvectorarray(int n_vec, int n_sum, sunrealtype *c,
                                          N_Vector **X, N_Vector *Z) {
    N_Vector column[n_sum > 0 ? n_sum : 1];
    for (int j = 0; j < n_vec; j++) {
        for (int k = 0; k < n_sum; k++) column[k] = X[k][j];
        v_linearcombination(n_sum, c, column, Z[j]);
    }
    return 0;
}

static void fast_vector(N_Vector v) {  /* its clones copy the table */
#ifdef SKLODE_LIBRARY_KERNELS  /* defined by a test that compares both to the bit */
    return;
#endif
    v->ops->nvlinearsum = v_linearsum;
    v->ops->nvconst = v_const;
    v->ops->nvprod = v_prod;
    v->ops->nvdiv = v_div;
    v->ops->nvscale = v_scale;
    v->ops->nvabs = v_abs;
    v->ops->nvinv = v_inv;
    v->ops->nvaddconst = v_addconst;
    v->ops->nvmaxnorm = v_maxnorm;
    v->ops->nvmaxnormlocal = v_maxnorm;
    v->ops->nvwrmsnorm = v_wrmsnorm;
    v->ops->nvwsqrsumlocal = v_wsqrsum;
    v->ops->nvmin = v_min;
    v->ops->nvminlocal = v_min;
    v->ops->nvlinearcombination = v_linearcombination;
    v->ops->nvscaleaddmulti = v_scaleaddmulti;
    v->ops->nvlinearsumvectorarray = v_linearsumvectorarray;
    v->ops->nvscalevectorarray = v_scalevectorarray;
    v->ops->nvconstvectorarray = v_constvectorarray;
    v->ops->nvwrmsnormvectorarray = v_wrmsnormvectorarray;
    v->ops->nvscaleaddmultivectorarray = v_scaleaddmultivectorarray;
    v->ops->nvlinearcombinationvectorarray = v_linearcombinationvectorarray;
}

/* The band of df/dx (and so of I - gamma J): BAND_LOWER rows below the diagonal, BAND_UPPER
 * columns above, from the structural entries the generator wrote (NX - 1 each: dense). A
 * 200-cell reaction-diffusion grid is tridiagonal: the factorisation costs NX * 2 * 3 instead
 * of NX^3 / 3, each solve NX * 4 instead of NX^2. */
#ifndef BAND_LOWER
#define BAND_LOWER (NX - 1)
#endif
#ifndef BAND_UPPER
#define BAND_UPPER (NX - 1)
#endif
static long band_end(long k, long width) { return k + width < NX - 1 ? k + width : NX - 1; }

/* The dense matrix (column-major, SM_COLS_D(A)[j][i] = A_ij): zero, copy, A = cA + I, each
 * over the entries the band LU reads (column j's rows j - BAND_LOWER - BAND_UPPER to
 * j + BAND_LOWER: the band plus U's fill from pivoting). The others are never read, so a
 * wide banded system is not charged NX^2 per Jacobian. */
static void band_rows(long j, long *first, long *count) {
    long top = j - (BAND_LOWER + BAND_UPPER);
    *first = top > 0 ? top : 0;
    *count = band_end(j, BAND_LOWER) - *first + 1;
}
static int m_zero(SUNMatrix A) {
    double **a = SM_COLS_D(A);
    for (long j = 0; j < NX; j++) {
        long first, count;
        band_rows(j, &first, &count);
        memset(a[j] + first, 0, sizeof(double) * count);
    }
    return 0;
}
static int m_copy(SUNMatrix A, SUNMatrix B) {
    double **a = SM_COLS_D(A), **b = SM_COLS_D(B);
    for (long j = 0; j < NX; j++) {
        long first, count;
        band_rows(j, &first, &count);
        memcpy(b[j] + first, a[j] + first, sizeof(double) * count);
    }
    return 0;
}
static int m_scaleaddi(sunrealtype c, SUNMatrix A) {
    double **a = SM_COLS_D(A);
    for (long j = 0; j < NX; j++) {
        long first, count;
        band_rows(j, &first, &count);
        for (long i = first; i < first + count; i++) a[j][i] *= c;
        a[j][j] += 1.0;
    }
    return 0;
}

/* CVODES keeps the Jacobian in a clone of A and copies it back from there: the clone must
 * carry the band operations too (with SUNDIALS' own copy, 39 % of a 1,000-cell solve). */
static void band_ops(SUNMatrix A);
static SUNMatrix m_clone(SUNMatrix A) {
    SUNMatrix B = SUNDenseMatrix(NX, NX, A->sunctx);
    if (B) band_ops(B);
    return B;
}
static void band_ops(SUNMatrix A) {
    A->ops->zero = m_zero;
    A->ops->copy = m_copy;
    A->ops->scaleaddi = m_scaleaddi;
    A->ops->clone = m_clone;
}

/* LU with partial pivoting (the first largest entry of a column), in place, LINPACK's
 * order (dgefa/dgbfa): a row interchange at step k touches columns k and after only, so the
 * multipliers stay inside the lower band, and the solve applies each interchange just before
 * its column's elimination. With partial pivoting U widens to BAND_LOWER + BAND_UPPER.
 * Returns 0, or k + 1 when column k has no nonzero pivot (CVODES then retries with a smaller
 * step). */
static long lu_factor(double **a, sunindextype *pivot) {
    for (long k = 0; k < NX; k++) {
        double *col_k = a[k];
        long last_row = band_end(k, BAND_LOWER);
        long last_col = band_end(k, BAND_LOWER + BAND_UPPER);
        long l = k;
        for (long i = k + 1; i <= last_row; i++) if (fabs(col_k[i]) > fabs(col_k[l])) l = i;
        pivot[k] = l;
        if (col_k[l] == 0.0) return k + 1;
        if (l != k) {
            for (long j = k; j <= last_col; j++) {
                double swap = a[j][l];
                a[j][l] = a[j][k];
                a[j][k] = swap;
            }
        }
        double scale = 1.0 / col_k[k];
        for (long i = k + 1; i <= last_row; i++) col_k[i] *= scale;
        for (long j = k + 1; j <= last_col; j++) {
            double *col_j = a[j];
            double a_kj = col_j[k];
            if (a_kj != 0.0) for (long i = k + 1; i <= last_row; i++) col_j[i] -= a_kj * col_k[i];
        }
    }
    return 0;
}
static void lu_solve(double **a, const sunindextype *pivot, double *b) {
    for (long k = 0; k < NX - 1; k++) {
        long l = (long)pivot[k];
        double b_k = b[l];
        if (l != k) { b[l] = b[k]; b[k] = b_k; }
        const double *col_k = a[k];
        long last_row = band_end(k, BAND_LOWER);
        for (long i = k + 1; i <= last_row; i++) b[i] -= col_k[i] * b_k;
    }
    for (long k = NX - 1; k >= 0; k--) {
        const double *col_k = a[k];
        b[k] /= col_k[k];
        double b_k = b[k];
        long first = k - (BAND_LOWER + BAND_UPPER) > 0 ? k - (BAND_LOWER + BAND_UPPER) : 0;
        for (long i = first; i < k; i++) b[i] -= col_k[i] * b_k;
    }
}
static int ls_setup(SUNLinearSolver S, SUNMatrix A) {
    SUNLinearSolverContent_Dense content = (SUNLinearSolverContent_Dense)S->content;
    content->last_flag = lu_factor(SM_COLS_D(A), content->pivots);
    return content->last_flag > 0 ? SUNLS_LUFACT_FAIL : 0;
}
static int ls_solve(SUNLinearSolver S, SUNMatrix A, N_Vector x, N_Vector b, sunrealtype tol) {
    SUNLinearSolverContent_Dense content = (SUNLinearSolverContent_Dense)S->content;
    (void)tol;
    if (HAS_PERM) {
        /* A holds P J P^T (the states reordered): solve for P x from P b */
        double *w = perm_work;
        const double *in = DAT(b);
        double *out = DAT(x);
        for (long i = 0; i < NX; i++) w[POS[i]] = in[i];
        lu_solve(SM_COLS_D(A), content->pivots, w);
        for (long i = 0; i < NX; i++) out[i] = w[POS[i]];
    } else {
        if (x != b) memcpy(DAT(x), DAT(b), sizeof(double) * NX);
        lu_solve(SM_COLS_D(A), content->pivots, DAT(x));
    }
    content->last_flag = 0;
    return 0;
}

#if SUNDIALS_VERSION_MAJOR < 7
/* CVODES prints its warnings and errors to stderr; sklode turns the flag into an
 * IntegrationError with a message of its own instead. */
static void silent(int code, const char *module, const char *function, char *message,
                   void *data) {
    (void)code; (void)module; (void)function; (void)message; (void)data;
}
#endif

/* One CVODES solver of the states (BDF, Newton on the model's Jacobian with the LU the model
 * asks for), set up at (t0, x0): what the forward solve and the adjoint's share. */
typedef struct {
    SUNContext ctx;
    void *mem;
    N_Vector y, abstol;
    SUNMatrix A;
    SUNLinearSolver LS;
} Solver;

static void close_solver(Solver *s) {
    if (s->mem) CVodeFree(&s->mem);
    if (s->LS) SUNLinSolFree(s->LS);
    if (s->A) SUNMatDestroy(s->A);
    if (s->y) N_VDestroy(s->y);
    if (s->abstol) N_VDestroy(s->abstol);
    if (s->ctx) SUNContext_Free(&s->ctx);
}

static int open_solver(Solver *s, UserData *u, double t0, const double *x0, double rtol,
                       const double *atol, long max_steps) {
    int flag;
    memset(s, 0, sizeof(*s));
#ifdef SKLODE_LIBRARY_KERNELS
    if (HAS_PERM) return -99;  /* SUNDIALS' own solve knows no reordering */
#endif
#if SUNDIALS_VERSION_MAJOR >= 7
    if ((flag = SUNContext_Create(SUN_COMM_NULL, &s->ctx))) return flag;
    SUNContext_ClearErrHandlers(s->ctx);
#else
    if ((flag = SUNContext_Create(NULL, &s->ctx))) return flag;
#endif
    s->y = N_VNew_Serial(NX, s->ctx);
    fast_vector(s->y);
    memcpy(N_VGetArrayPointer(s->y), x0, sizeof(double) * NX);
    if (NROOTS > 0) {
        model_switches(t0, x0, u->p, u->sw);  /* so that the field read below has values */
        settle_switches(u, t0, x0, NULL, NULL);
    }
    s->mem = CVodeCreate(CV_BDF, s->ctx);
    if ((flag = CVodeInit(s->mem, rhs, t0, s->y))) return flag;
#if SUNDIALS_VERSION_MAJOR < 7
    CVodeSetErrHandlerFn(s->mem, silent, NULL);
#endif
    CVodeSetMaxHnilWarns(s->mem, -1);
    s->abstol = N_VNew_Serial(NX, s->ctx);  /* one per state: PEtab's offset states need it */
    fast_vector(s->abstol);
    memcpy(N_VGetArrayPointer(s->abstol), atol, sizeof(double) * NX);
    if ((flag = CVodeSVtolerances(s->mem, rtol, s->abstol))) return flag;
    if ((flag = CVodeSetUserData(s->mem, u))) return flag;
    if ((flag = CVodeSetMaxNumSteps(s->mem, max_steps))) return flag;
#ifdef SKLODE_HAVE_KLU
    if (SPARSE) {
        s->A = SUNSparseMatrix(NX, NX, CSC_NNZ, CSC_MAT, s->ctx);
        s->LS = s->A ? SUNLinSol_KLU(s->y, s->A, s->ctx) : NULL;
        if (!s->LS) return CV_MEM_FAIL;
        /* AMD on A + A^T: Chen_MSB2009's 39 solves took 19 CPU s with it, 52 with KLU's
         * default COLAMD and 226 in the natural order */
        SUNLinSol_KLUSetOrdering(s->LS, 0);
    } else
#endif
    {
        s->A = SUNDenseMatrix(NX, NX, s->ctx);
        s->LS = SUNLinSol_Dense(s->y, s->A, s->ctx);
#ifndef SKLODE_LIBRARY_KERNELS
        band_ops(s->A);
        s->LS->ops->setup = ls_setup;
        s->LS->ops->solve = ls_solve;
#endif
    }
    if ((flag = CVodeSetLinearSolver(s->mem, s->LS, s->A))) return flag;
    return CVodeSetJacFn(s->mem, jac);
}

/* The counts and the failure kind of a solve in info[]. */
static void report(double *info, const UserData *u, void *mem, long steps_before, int flag) {
    if (mem) {
        long n_steps = 0;
        CVodeGetNumSteps(mem, &n_steps);
        info[INFO_N_STEPS] = (double)(steps_before + n_steps);
    }
    info[INFO_T_REACHED] = u->t_last;
    info[INFO_N_RHS] = (double)u->n_rhs;
    info[INFO_FAILURE] = flag < 0 ? (u->failure ? u->failure : CVODES_FAILED) : OK;
}

/* Solve from (t0, x0) to the increasing times[0..n_times-1] (each >= t0); write the states
 * to out[n_times][NX] and, when n_sens > 0, the sensitivities to sens_out[n_times][n_sens][NX]
 * (their values at t0 in s0[n_sens][NX]). Returns 0 or the CVODES flag that stopped it. */
SKLODE_ENTRY int sklode_solve(double t0, const double *x0, const double *p, int n_times,
                 const double *times, double rtol, const double *atol, long max_steps,
                 double blowup, int n_sens, const int *sens_param, const double *s0,
                 double *out, double *sens_out, double *info, int n_doses,
                 const double *dose_times, const int *dose_states,
                 const double *dose_amounts) {
    Solver s;
    void *mem;
    N_Vector y, *yS = NULL;
    UserData u;
    int flag = 0, k = 0;
    long steps_before = 0;  /* steps before the last restart at a switch */
    int rescues = 0;  /* restarts past a switch the steps could not cross */
    sunrealtype t = t0;
    /* Boluses (increasing times; those at or before t0 are the caller's, in x0): the solve
     * stops at each, adds it and restarts, the sensitivities carried on unchanged (a known
     * amount moves no derivative). One call for a whole dosing history: a restart per dose,
     * not a call (Phenobarb's 589 doses were 132,000 calls of a population fit). A dose at
     * an output time acts after that output (a trough sample before the dose). */
    int next_dose = 0;
    const double last = n_times > 0 ? times[n_times - 1] : t0;
    while (next_dose < n_doses && dose_times[next_dose] <= t0) next_dose++;
#define SKLODE_STOP_AT \
    ((next_dose < n_doses && dose_times[next_dose] < last) ? dose_times[next_dose] : last)

    memset(&u, 0, sizeof(u));
    memset(&s, 0, sizeof(s));
    u.p = p; u.blowup = blowup; u.t_last = t0;
    u.n_sens = n_sens; u.sens_param = sens_param;
    u.x_nonfinite = info + INFO_SIZE;
    if (alloc_work(&u)) { flag = CV_MEM_FAIL; goto done; }
    perm_work = u.perm_work;
    if ((flag = open_solver(&s, &u, t0, x0, rtol, atol, max_steps))) goto done;
    mem = s.mem;
    y = s.y;
    if (n_sens > 0) {
        yS = N_VCloneVectorArray(n_sens, y);
        for (int j = 0; j < n_sens; j++)
            memcpy(N_VGetArrayPointer(yS[j]), s0 + (long)j * NX, sizeof(double) * NX);
        /* Staggered: the states' Newton iteration converges first, then the sensitivities'
         * linear corrector. The simultaneous corrector (one Newton iteration on both)
         * failed to converge on Weber et al.'s 18th start just after its dose (CV_CONV_FAILURE
         * at t = 24.7, where the states alone pass); staggered fits it (300.96, pyPESTO
         * 300.95) at the same CPU per Jacobian (Bertozzi, Raia, Brannmark within 6 %,
         * Fujita 19 % less) and gradients equal to 1e-7. */
        if ((flag = CVodeSensInit(mem, n_sens, CV_STAGGERED, sens_rhs, yS))) goto done;
        if ((flag = CVodeSensEEtolerances(mem))) goto done;
        /* The steps follow the states' error alone: the sensitivities ride on them (their
         * Newton corrector still converges at every step). With the sensitivities in the
         * error test, one Jacobian on a PEtab start at -log L 1e24 (Fujita, derivatives of
         * 1e24) took 101 CPU s instead of 3.5 s, for gradients equal to 1e-12; on ordinary
         * starts 1.3-1.8x less CPU, gradients equal to 1e-8. */
        if ((flag = CVodeSetSensErrCon(mem, SUNFALSE))) goto done;
    }
    if (NROOTS > 0 && (flag = CVodeRootInit(mem, NROOTS, roots))) goto done;
    /* No step past the last time: a switch of the field right at it (a dose that ends with
     * the experiment) would otherwise need a step shorter than t's last digit to cross. */
    if (n_times > 0 && (flag = CVodeSetStopTime(mem, SKLODE_STOP_AT))) goto done;
    for (k = 0; k < n_times; k++) {
        while (times[k] > t) {
            sunrealtype target = times[k];
            if (next_dose < n_doses && dose_times[next_dose] <= t) {  /* doses due here */
                double *state = N_VGetArrayPointer(y);
                long n_steps = 0;
                while (next_dose < n_doses && dose_times[next_dose] <= t) {
                    state[dose_states[next_dose]] += dose_amounts[next_dose];
                    next_dose++;
                }
                if (NROOTS > 0) settle_switches(&u, t, state, NULL, NULL);
                CVodeGetNumSteps(mem, &n_steps);
                steps_before += n_steps;
                if ((flag = CVodeReInit(mem, t, y))) break;
                if ((flag = CVodeSetStopTime(mem, SKLODE_STOP_AT))) break;
                if (n_sens > 0 && (flag = CVodeSensReInit(mem, CV_STAGGERED, yS))) break;
            }
            if (next_dose < n_doses && dose_times[next_dose] < target)
                target = dose_times[next_dose];
            flag = CVode(mem, target, y, &t, CV_NORMAL);
            if (NROOTS > 0 && (flag == CV_TOO_MUCH_WORK || flag == CV_ERR_FAILURE || flag == CV_CONV_FAILURE)
                    && !u.failure && rescues < 10) {
                /* Stuck just before a switch of the field, with steps of rounding size
                 * that do not reach the crossing the root search needs. When the field read
                 * its switches from t this was Weber et al. 2015's t = 24 (h = 1.2e-15 at
                 * 24 - 7e-15 until the step budget ran out); with held switches it is kept
                 * for a switching function that only touches zero. Restart just past it:
                 * the state moves by f * 2e-13 |t|, far below any tolerance. */
                sunrealtype h_last = 0.0, *g = u.g;
                sunrealtype nudge = 1e3 * DBL_EPSILON * fmax(1.0, fabs(t));
                int near = 0;
                CVodeGetLastStep(mem, &h_last);
                roots(t, y, g, &u);
                for (int i = 0; i < NROOTS; i++)
                    near |= fabs(g[i]) <= nudge;
                if (near && fabs(h_last) <= nudge && t < target) {
                    long n_steps = 0;
                    CVodeGetNumSteps(mem, &n_steps);
                    steps_before += n_steps;
                    rescues++;
                    if (n_sens > 0 && (flag = CVodeGetSens(mem, &t, yS)) < 0) break;
                    t = t + nudge < target ? t + nudge : target;
                    settle_switches(&u, t, N_VGetArrayPointer(y), NULL, NULL);
                    if ((flag = CVodeReInit(mem, t, y))) break;
                    if ((flag = CVodeSetStopTime(mem, SKLODE_STOP_AT))) break;
                    if (n_sens > 0 && (flag = CVodeSensReInit(mem, CV_STAGGERED, yS))) break;
                    continue;
                }
            }
            if (flag < 0) break;
            if (n_sens > 0) {
                int sens_flag = CVodeGetSens(mem, &t, yS);
                if (sens_flag < 0) { flag = sens_flag; break; }
            }
            if (flag == CV_ROOT_RETURN) {  /* a switch: restart the method from here */
                long n_steps = 0;
                /* the values past the roots found (a root found again right after the
                 * restart sets the same value) */
                if ((flag = CVodeGetRootInfo(mem, u.found))) break;
                settle_switches(&u, t, N_VGetArrayPointer(y), u.found, u.found);
                CVodeGetNumSteps(mem, &n_steps);  /* ReInit resets the count */
                steps_before += n_steps;
                if ((flag = CVodeReInit(mem, t, y))) break;
                if ((flag = CVodeSetStopTime(mem, SKLODE_STOP_AT))) break;
                if (n_sens > 0 && (flag = CVodeSensReInit(mem, CV_STAGGERED, yS))) break;
            }
        }
        if (flag < 0) break;
        memcpy(out + (long)k * NX, N_VGetArrayPointer(y), sizeof(double) * NX);
        for (int j = 0; j < n_sens; j++)
            memcpy(sens_out + ((long)k * n_sens + j) * NX, N_VGetArrayPointer(yS[j]),
                   sizeof(double) * NX);
        flag = 0;
    }
done:
#undef SKLODE_STOP_AT
    report(info, &u, s.mem, steps_before, flag);
    if (yS) N_VDestroyVectorArray(yS, n_sens);
    close_solver(&s);
    free_work(&u);
    perm_work = NULL;
    return flag < 0 ? flag : 0;
}

/* ----------------------------------------------------------------------------------------
 * The adjoint: the gradient of a sum of terms in the states at the observation times in one
 * backward solve, whatever the number of parameters.
 *
 * For L = sum_k l_k(x(t_k)), with jumps[k] = dl_k/dx at x(t_k): lambda' = -J^T lambda from
 * lambda(t_N) = jumps[N-1] back to t0, lambda growing by jumps[k] at each t_k, and the
 * quadrature q' = -(df/dtheta)^T lambda from q(t_N) = 0; then dL/dx0 = lambda(t0) and
 * dL/dtheta = q(t0) (the continuous adjoint with discrete data, as AMICI computes it). CVODES
 * stores the forward solution at checkpoints (CVodeF), recomputes it between them and
 * interpolates it (Hermite) for the backward steps; these are BDF with Newton on -J^T: KLU
 * on the same arrays read as compressed rows (J^T's columns are J's rows), or SUNDIALS' dense
 * LU (the band LU above works on J's band, not its transpose's).
 * ------------------------------------------------------------------------------------- */
static int rhs_adjoint(sunrealtype t, N_Vector y, N_Vector yB, N_Vector yBdot, void *user_data) {
    UserData *u = (UserData *)user_data;
    const double *lambda = N_VGetArrayPointer(yB);
    double *out = N_VGetArrayPointer(yBdot);
    model_jx(t, N_VGetArrayPointer(y), u->p, u->sw, u->jx);
    memset(out, 0, sizeof(double) * NX);
    for (int k = 0; k < NNZ_X; k++) out[JX_COL[k]] -= u->jx[k] * lambda[JX_ROW[k]];
    for (int i = 0; i < NX; i++) if (!isfinite(out[i])) return 1;  /* shorter step */
    return 0;
}

static int rhs_quadrature(sunrealtype t, N_Vector y, N_Vector yB, N_Vector qBdot,
                          void *user_data) {
    UserData *u = (UserData *)user_data;
    const double *lambda = N_VGetArrayPointer(yB);
    double *out = N_VGetArrayPointer(qBdot);
    model_jp(t, N_VGetArrayPointer(y), u->p, u->sw, u->jp);
    memset(out, 0, sizeof(double) * (NP > 0 ? NP : 1));
    for (int k = 0; k < NNZ_P; k++) out[JP_COL[k]] -= u->jp[k] * lambda[JP_ROW[k]];
    return 0;
}

static int jac_adjoint(sunrealtype t, N_Vector y, N_Vector yB, N_Vector fyB, SUNMatrix JB,
                       void *user_data, N_Vector tmp1, N_Vector tmp2, N_Vector tmp3) {
    UserData *u = (UserData *)user_data;
    (void)yB; (void)fyB; (void)tmp1; (void)tmp2; (void)tmp3;
    model_jx(t, N_VGetArrayPointer(y), u->p, u->sw, u->jx);
#ifdef SKLODE_HAVE_KLU
    if (SPARSE) {  /* -J^T in compressed rows: J's compressed columns, negated */
        sunindextype *start = SUNSparseMatrix_IndexPointers(JB);
        sunindextype *column = SUNSparseMatrix_IndexValues(JB);
        double *data = SUNSparseMatrix_Data(JB);
        for (int j = 0; j <= NX; j++) start[j] = CSC_START[j];
        for (int k = 0; k < CSC_NNZ; k++) { column[k] = CSC_ROW[k]; data[k] = 0.0; }
        for (int k = 0; k < NNZ_X; k++) data[CSC_SLOT[k]] = -u->jx[k];
        return 0;
    }
#endif
    SUNMatZero(JB);
    for (int k = 0; k < NNZ_X; k++) SM_ELEMENT_D(JB, JX_COL[k], JX_ROW[k]) = -u->jx[k];
    return 0;
}

/* Steps between the forward checkpoints: the solution of a whole interval is kept in memory
 * (two vectors a step) and recomputed once in the backward pass; about 2^22 doubles. */
static long checkpoint_steps(void) {
    long steps = (1L << 21) / (NX > 0 ? NX : 1);
    return steps < 50 ? 50 : steps > 5000 ? 5000 : steps;
}

/* Solve forward from (t0, x0) to the increasing times (each >= t0, the last > t0), writing
 * the states to out[n_times][NX] as sklode_solve does, then the adjoint back to t0 with
 * jumps[n_times][NX]: grad_x0[NX] = dL/dx0 and grad_p[NP] = dL/dtheta. The switches keep
 * the values they take just after t0 (no root is searched: a restart at one would end
 * CVODES' record of the forward solution; the caller solves in segments between the times
 * the switches change). Returns 0 or the CVODES flag that stopped it (info as
 * sklode_solve's, for the forward pass). */
SKLODE_ENTRY int sklode_adjoint(double t0, const double *x0, const double *p, int n_times,
                   const double *times, double rtol, const double *atol, long max_steps,
                   double blowup, const double *jumps, double *out, double *grad_x0,
                   double *grad_p, double *info) {
    Solver s;
    UserData u;
    N_Vector lambda = NULL, q = NULL, atol_b = NULL;
    SUNMatrix AB = NULL;
    SUNLinearSolver LSB = NULL;
    int flag = 0, which = 0, n_checkpoints = 0;
    sunrealtype t = t0;

    memset(&u, 0, sizeof(u));
    memset(&s, 0, sizeof(s));
    u.p = p; u.blowup = blowup; u.t_last = t0;
    u.x_nonfinite = info + INFO_SIZE;
    if (n_times < 1 || times[n_times - 1] <= t0) { flag = CV_ILL_INPUT; goto done; }
    if (alloc_work(&u)) { flag = CV_MEM_FAIL; goto done; }
    perm_work = u.perm_work;
    if ((flag = open_solver(&s, &u, t0, x0, rtol, atol, max_steps))) goto done;
    if ((flag = CVodeAdjInit(s.mem, checkpoint_steps(), CV_HERMITE))) goto done;
    if ((flag = CVodeSetStopTime(s.mem, times[n_times - 1]))) goto done;
    for (int k = 0; k < n_times; k++) {
        if (times[k] > t && (flag = CVodeF(s.mem, times[k], s.y, &t, CV_NORMAL,
                                           &n_checkpoints)) < 0) goto done;
        memcpy(out + (long)k * NX, N_VGetArrayPointer(s.y), sizeof(double) * NX);
    }
    flag = 0;

    lambda = N_VNew_Serial(NX, s.ctx);
    q = N_VNew_Serial(NP > 0 ? NP : 1, s.ctx);
    atol_b = N_VClone(s.abstol);
    if (!lambda || !q || !atol_b) { flag = CV_MEM_FAIL; goto done; }
    fast_vector(lambda);
    fast_vector(q);
    N_VScale(1.0, s.abstol, atol_b);
    memcpy(N_VGetArrayPointer(lambda), jumps + (long)(n_times - 1) * NX, sizeof(double) * NX);
    N_VConst(0.0, q);
    if ((flag = CVodeCreateB(s.mem, CV_BDF, &which))) goto done;
    if ((flag = CVodeInitB(s.mem, which, rhs_adjoint, times[n_times - 1], lambda))) goto done;
#if SUNDIALS_VERSION_MAJOR < 7
    CVodeSetErrHandlerFn(CVodeGetAdjCVodeBmem(s.mem, which), silent, NULL);
#endif
    /* lambda's scale is the data's over their noise, not the states': its absolute
     * tolerance is the states' (as AMICI's default), its steps controlled like theirs */
    if ((flag = CVodeSVtolerancesB(s.mem, which, rtol, atol_b))) goto done;
    if ((flag = CVodeSetUserDataB(s.mem, which, &u))) goto done;
    if ((flag = CVodeSetMaxNumStepsB(s.mem, which, max_steps))) goto done;
#ifdef SKLODE_HAVE_KLU
    if (SPARSE) {
        AB = SUNSparseMatrix(NX, NX, CSC_NNZ, CSR_MAT, s.ctx);
        LSB = AB ? SUNLinSol_KLU(lambda, AB, s.ctx) : NULL;
        if (!LSB) { flag = CV_MEM_FAIL; goto done; }
        SUNLinSol_KLUSetOrdering(LSB, 0);
    } else
#endif
    {
        AB = SUNDenseMatrix(NX, NX, s.ctx);
        LSB = SUNLinSol_Dense(lambda, AB, s.ctx);
    }
    if ((flag = CVodeSetLinearSolverB(s.mem, which, LSB, AB))) goto done;
    if ((flag = CVodeSetJacFnB(s.mem, which, jac_adjoint))) goto done;
    if ((flag = CVodeQuadInitB(s.mem, which, rhs_quadrature, q))) goto done;
    /* The quadrature in the error test, at the states' smallest absolute tolerance (as
     * AMICI's defaults): riding on lambda's steps alone, SalazarCavazos_MBoC2020's gradient
     * at rtol 1e-8 was 9.5e-4 off (where lambda is small its steps are long, not f_theta's
     * product with it); with it 9.0e-6, as the forward sensitivities' 8.7e-6, same CPU. */
    if ((flag = CVodeQuadSStolerancesB(s.mem, which, rtol, N_VMin(s.abstol)))) goto done;
    if ((flag = CVodeSetQuadErrConB(s.mem, which, SUNTRUE))) goto done;

    for (int k = n_times - 1; k >= 0; k--) {
        double until = k > 0 ? times[k - 1] : t0;
        if (until < times[k]) {
            if ((flag = CVodeB(s.mem, until, CV_NORMAL)) < 0) goto done;
            if ((flag = CVodeGetB(s.mem, which, &t, lambda)) < 0) goto done;
            if ((flag = CVodeGetQuadB(s.mem, which, &t, q)) < 0) goto done;
        }
        if (k > 0) {  /* the data at times[k - 1]: lambda jumps, the solve restarts there */
            double *l = N_VGetArrayPointer(lambda);
            const double *jump = jumps + (long)(k - 1) * NX;
            for (int i = 0; i < NX; i++) l[i] += jump[i];
            if ((flag = CVodeReInitB(s.mem, which, until, lambda))) goto done;
            if ((flag = CVodeQuadReInitB(s.mem, which, q))) goto done;
        }
    }
    flag = 0;
    memcpy(grad_x0, N_VGetArrayPointer(lambda), sizeof(double) * NX);
    if (NP > 0) memcpy(grad_p, N_VGetArrayPointer(q), sizeof(double) * NP);
done:
    report(info, &u, s.mem, 0, flag);
    if (LSB) SUNLinSolFree(LSB);
    if (AB) SUNMatDestroy(AB);
    if (lambda) N_VDestroy(lambda);
    if (q) N_VDestroy(q);
    if (atol_b) N_VDestroy(atol_b);
    close_solver(&s);  /* CVodeFree frees the backward problem and the checkpoints too */
    free_work(&u);
    perm_work = NULL;
    return flag < 0 ? flag : 0;
}

/* ----------------------------------------------------------------------------------------
 * Events: where the first of the model's triggers crosses zero from below.
 *
 * The switches' functions and the triggers are CVODES' root functions together; a switch
 * (either direction) restarts the solve as in sklode_solve, a trigger found rising stops it
 * there. CVODES reports only rising crossings of a trigger (CVodeSetRootDirection), so one
 * that holds at the start must first fall below zero, as a trigger that already fired must.
 * ------------------------------------------------------------------------------------- */
static int roots_and_events(sunrealtype t, N_Vector y, sunrealtype *g, void *user_data) {
    UserData *u = (UserData *)user_data;
    const double *x = N_VGetArrayPointer(y);
    if (NROOTS > 0) model_roots(t, x, u->p, g);
    model_event_values(t, x, u->p, g + NROOTS);
    return 0;
}

/* Solve from (t0, x0) towards t_end (> t0) and stop where an event's trigger first crosses
 * zero rising: stop[0] its time (t_end where none does), stop[1..NX] the state there;
 * fired[NEVENTS] 1.0 for the events whose triggers cross there, else 0.0. Returns 0 or the
 * CVODES flag that stopped it (info as sklode_solve's). */
SKLODE_ENTRY int sklode_locate(double t0, const double *x0, const double *p, double t_end,
                  double rtol, const double *atol, long max_steps, double blowup,
                  double *stop, double *fired, double *info) {
    Solver s;
    UserData u;
    int flag = 0, any = 0;
    long steps_before = 0;
    sunrealtype t = t0;
    int *direction = NULL;

    memset(&u, 0, sizeof(u));
    memset(&s, 0, sizeof(s));
    u.p = p; u.blowup = blowup; u.t_last = t0;
    u.x_nonfinite = info + INFO_SIZE;
    for (int i = 0; i < NEVENTS; i++) fired[i] = 0.0;
    if (NEVENTS < 1 || t_end <= t0) { flag = CV_ILL_INPUT; goto done; }
    if (alloc_work(&u)) { flag = CV_MEM_FAIL; goto done; }
    perm_work = u.perm_work;
    if ((flag = open_solver(&s, &u, t0, x0, rtol, atol, max_steps))) goto done;
    if ((flag = CVodeRootInit(s.mem, NROOTS + NEVENTS, roots_and_events))) goto done;
    direction = (int *)calloc((size_t)(NROOTS + NEVENTS), sizeof(int));
    if (!direction) { flag = CV_MEM_FAIL; goto done; }
    for (int i = 0; i < NEVENTS; i++) direction[NROOTS + i] = 1;  /* rising triggers only */
    if ((flag = CVodeSetRootDirection(s.mem, direction))) goto done;
    if ((flag = CVodeSetStopTime(s.mem, t_end))) goto done;
    while (t < t_end && !any) {
        flag = CVode(s.mem, t_end, s.y, &t, CV_NORMAL);
        if (flag < 0) goto done;
        if (flag != CV_ROOT_RETURN) continue;
        if ((flag = CVodeGetRootInfo(s.mem, u.found))) goto done;
        for (int i = 0; i < NEVENTS; i++)
            if (u.found[NROOTS + i] > 0) { fired[i] = 1.0; any = 1; }
        if (!any) {  /* a switch of the field: restart the method from here */
            long n_steps = 0;
            settle_switches(&u, t, N_VGetArrayPointer(s.y), u.found, u.found);
            CVodeGetNumSteps(s.mem, &n_steps);
            steps_before += n_steps;
            if ((flag = CVodeReInit(s.mem, t, s.y))) goto done;
            if ((flag = CVodeSetStopTime(s.mem, t_end))) goto done;
        }
    }
    flag = 0;
    stop[0] = any ? t : t_end;
    memcpy(stop + 1, N_VGetArrayPointer(s.y), sizeof(double) * NX);
done:
    report(info, &u, s.mem, steps_before, flag);
    free(direction);
    close_solver(&s);
    free_work(&u);
    perm_work = NULL;
    return flag < 0 ? flag : 0;
}

/* The triggers' values at one point: what sklode checks against the model's own. */
SKLODE_ENTRY void sklode_event_values(double t, const double *x, const double *p, double *g) {
    model_event_values(t, x, p, g);
}

/* The field and both Jacobians (dense, row-major) at one point: what sklode checks against
 * the numpy program before it uses the library. */
SKLODE_ENTRY void sklode_evaluate(double t, const double *x, const double *p, double *dx,
                                  double *jx, double *jp) {
    double *values_x = (double *)malloc(sizeof(double) * (NNZ_X > 0 ? NNZ_X : 1));
    double *values_p = (double *)malloc(sizeof(double) * (NNZ_P > 0 ? NNZ_P : 1));
    if (!values_x || !values_p) { free(values_x); free(values_p); return; }
    model_f(t, x, p, NULL, dx);
    model_jx(t, x, p, NULL, values_x);
    model_jp(t, x, p, NULL, values_p);
    memset(jx, 0, sizeof(double) * NX * NX);
    memset(jp, 0, sizeof(double) * NX * (NP > 0 ? NP : 1));
    for (int k = 0; k < NNZ_X; k++) jx[JX_ROW[k] * NX + JX_COL[k]] = values_x[k];
    for (int k = 0; k < NNZ_P; k++) jp[JP_ROW[k] * NP + JP_COL[k]] = values_p[k];
    free(values_x);
    free(values_p);
}
