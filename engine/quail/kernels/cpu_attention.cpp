// Paged attention for bf16 K/V on CPUs with AVX512-BF16, one fused pass per query-row block.
//
// Scores are bf16 products summed in fp32 (vdpbf16ps: the products are exact), the softmax and the
// weighted sum of values run in fp32 on the values widened, so a row's result differs from the fp32
// reference only in the order of its sums. Keys come in fixed blocks of 64 from key 0 and each row
// stops at its own last visible key: a row's result does not depend on the rows it is computed with.
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>

namespace {

constexpr int KB = 64;        // keys per block: four vectors of 16
constexpr int ROW_TILE = 4;   // query rows per microkernel call

inline __m512 exp_ps(__m512 x) {
    // exp on x <= 0: x = n ln2 + r (Cody-Waite), exp(r) by its Taylor series to degree 7 (|r| <= ln2/2)
    const __m512 log2e = _mm512_set1_ps(1.44269504088896341f);
    const __m512 ln2_hi = _mm512_set1_ps(0.693359375f), ln2_lo = _mm512_set1_ps(-2.12194440e-4f);
    x = _mm512_max_ps(x, _mm512_set1_ps(-87.0f));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, log2e), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, ln2_hi, x);
    r = _mm512_fnmadd_ps(n, ln2_lo, r);
    __m512 p = _mm512_set1_ps(1.0f / 5040);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n);
}

struct Args {
    const uint16_t* q;
    const uint16_t* k;
    const uint16_t* v;
    uint16_t* out;
    const int64_t* q_start;
    const int64_t* q_len;
    const int64_t* k_len;
    const int64_t* pages;  // [batch, max_pages]
    int64_t max_pages, q_stride, heads, kv_heads, dim, page_size;
    float scale;
};

// Scores of NR rows against a block of keys packed as [dim / 2][64] pairs of bf16.
template <int NR>
inline void scores(const uint32_t* const* q, const uint32_t* kp, int pairs, __m512 s[NR][4]) {
    for (int r = 0; r < NR; ++r)
        for (int c = 0; c < 4; ++c) s[r][c] = _mm512_setzero_ps();
    for (int d = 0; d < pairs; ++d) {
        __m512bh k0 = (__m512bh)_mm512_loadu_si512(kp + d * KB);
        __m512bh k1 = (__m512bh)_mm512_loadu_si512(kp + d * KB + 16);
        __m512bh k2 = (__m512bh)_mm512_loadu_si512(kp + d * KB + 32);
        __m512bh k3 = (__m512bh)_mm512_loadu_si512(kp + d * KB + 48);
        for (int r = 0; r < NR; ++r) {
            __m512bh qb = (__m512bh)_mm512_set1_epi32((int)q[r][d]);
            s[r][0] = _mm512_dpbf16_ps(s[r][0], qb, k0);
            s[r][1] = _mm512_dpbf16_ps(s[r][1], qb, k1);
            s[r][2] = _mm512_dpbf16_ps(s[r][2], qb, k2);
            s[r][3] = _mm512_dpbf16_ps(s[r][3], qb, k3);
        }
    }
}

// o[r] += p[r] . vf over the block's keys, 64 of the head's dims at a time.
template <int NR>
inline void weigh(float* const* o, const float* p, const float* vf, int keys, int dim) {
    for (int d0 = 0; d0 < dim; d0 += 64) {
        __m512 acc[NR][4];
        for (int r = 0; r < NR; ++r)
            for (int c = 0; c < 4; ++c) acc[r][c] = _mm512_loadu_ps(o[r] + d0 + 16 * c);
        for (int j = 0; j < keys; ++j) {
            const float* vj = vf + j * dim + d0;
            __m512 v0 = _mm512_loadu_ps(vj), v1 = _mm512_loadu_ps(vj + 16);
            __m512 v2 = _mm512_loadu_ps(vj + 32), v3 = _mm512_loadu_ps(vj + 48);
            for (int r = 0; r < NR; ++r) {
                __m512 pr = _mm512_set1_ps(p[r * KB + j]);
                acc[r][0] = _mm512_fmadd_ps(pr, v0, acc[r][0]);
                acc[r][1] = _mm512_fmadd_ps(pr, v1, acc[r][1]);
                acc[r][2] = _mm512_fmadd_ps(pr, v2, acc[r][2]);
                acc[r][3] = _mm512_fmadd_ps(pr, v3, acc[r][3]);
            }
        }
        for (int r = 0; r < NR; ++r)
            for (int c = 0; c < 4; ++c) _mm512_storeu_ps(o[r] + d0 + 16 * c, acc[r][c]);
    }
}

struct Scratch {
    uint32_t* kp;  // [dim / 2][KB]
    float* vf;     // [KB][dim]
    float* p;      // [ROW_TILE][KB]
    float* o;      // [rows][dim]
    float* m;      // [rows]
    float* l;      // [rows]
    int64_t* last; // [rows]: the row's last visible key
    const uint32_t** qrow;  // [rows]
};

// One tile of NR rows over one key block starting at key j0 with `keys` keys present.
template <int NR>
void tile(const Args& a, Scratch& s, int row0, int64_t j0, int keys) {
    const uint32_t* q[NR];
    float* o[NR];
    __m512 sc[NR][4];
    for (int r = 0; r < NR; ++r) {
        q[r] = s.qrow[row0 + r];
        o[r] = s.o + (int64_t)(row0 + r) * a.dim;
    }
    scores<NR>(q, s.kp, (int)(a.dim / 2), sc);
    const __m512 scale = _mm512_set1_ps(a.scale);
    const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    int used = 0;  // keys of the block that any row of the tile sees
    for (int r = 0; r < NR; ++r) {
        const int64_t last = s.last[row0 + r];
        const int visible = (int)(last - j0 + 1 < keys ? last - j0 + 1 : keys);
        float* pr = s.p + r * KB;
        if (visible <= 0) {  // nothing of this block: the row's state is unchanged
            std::memset(pr, 0, sizeof(float) * KB);
            continue;
        }
        used = visible > used ? visible : used;
        __mmask16 valid[4];
        __m512 mx = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
        for (int c = 0; c < 4; ++c) {
            valid[c] = _mm512_cmplt_epi32_mask(_mm512_add_epi32(lane, _mm512_set1_epi32(16 * c)),
                                               _mm512_set1_epi32(visible));
            sc[r][c] = _mm512_mul_ps(sc[r][c], scale);
            mx = _mm512_mask_max_ps(mx, valid[c], mx, sc[r][c]);
        }
        const float m_old = s.m[row0 + r];
        const float m_new = std::fmax(m_old, _mm512_reduce_max_ps(mx));
        const __m512 mv = _mm512_set1_ps(m_new);
        __m512 sum = _mm512_setzero_ps();
        for (int c = 0; c < 4; ++c) {
            __m512 e = _mm512_maskz_mov_ps(valid[c], exp_ps(_mm512_sub_ps(sc[r][c], mv)));
            _mm512_storeu_ps(pr + 16 * c, e);
            sum = _mm512_add_ps(sum, e);
        }
        const float alpha = std::exp(m_old - m_new);  // exactly 1 when the maximum stands, 0 at the start
        s.l[row0 + r] = s.l[row0 + r] * alpha + _mm512_reduce_add_ps(sum);
        s.m[row0 + r] = m_new;
        if (alpha != 1.0f) {
            const __m512 av = _mm512_set1_ps(alpha);
            for (int d = 0; d < a.dim; d += 16)
                _mm512_storeu_ps(o[r] + d, _mm512_mul_ps(_mm512_loadu_ps(o[r] + d), av));
        }
    }
    if (used > 0) weigh<NR>(o, s.p, s.vf, used, (int)a.dim);
}

// Query rows [i0, i1) of sequence b, for the query heads that share kv head h.
void item(const Args& a, Scratch& s, int64_t b, int64_t h, int64_t i0, int64_t i1) {
    const int64_t group = a.heads / a.kv_heads, dim = a.dim, pairs = dim / 2;
    const int64_t shift = a.k_len[b] - a.q_len[b];  // keys before the first query row
    const int rows = (int)((i1 - i0) * group);
    for (int64_t i = i0; i < i1; ++i)
        for (int64_t g = 0; g < group; ++g) {
            const int row = (int)((i - i0) * group + g);
            const int64_t t = a.q_start[b] + i;
            s.qrow[row] = reinterpret_cast<const uint32_t*>(a.q + t * a.q_stride + (h * group + g) * dim);
            s.last[row] = shift + i;
            s.m[row] = -std::numeric_limits<float>::infinity();
            s.l[row] = 0.0f;
        }
    std::memset(s.o, 0, sizeof(float) * rows * dim);
    const int64_t end = shift + i1;  // keys the last row sees
    const int64_t* table = a.pages + b * a.max_pages;
    const int64_t token_stride = a.kv_heads * dim;
    for (int64_t j0 = 0; j0 < end; j0 += KB) {
        const int keys = (int)(end - j0 < KB ? end - j0 : KB);
        for (int j = 0; j < KB; ++j) {
            if (j < keys) {
                const int64_t key = j0 + j;
                const int64_t slot = table[key / a.page_size] * a.page_size + key % a.page_size;
                const uint16_t* kj = a.k + slot * token_stride + h * dim;
                const uint16_t* vj = a.v + slot * token_stride + h * dim;
                const uint32_t* kw = reinterpret_cast<const uint32_t*>(kj);
                for (int64_t d = 0; d < pairs; ++d) s.kp[d * KB + j] = kw[d];
                float* vrow = s.vf + j * dim;
                for (int64_t d = 0; d < dim; d += 16) {
                    __m512i wide = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i*)(vj + d)));
                    _mm512_storeu_ps(vrow + d, _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16)));
                }
            } else {
                for (int64_t d = 0; d < pairs; ++d) s.kp[d * KB + j] = 0;
            }
        }
        int r = 0;
        for (; r + ROW_TILE <= rows; r += ROW_TILE) tile<ROW_TILE>(a, s, r, j0, keys);
        switch (rows - r) {
            case 3: tile<3>(a, s, r, j0, keys); break;
            case 2: tile<2>(a, s, r, j0, keys); break;
            case 1: tile<1>(a, s, r, j0, keys); break;
            default: break;
        }
    }
    for (int64_t i = i0; i < i1; ++i)
        for (int64_t g = 0; g < group; ++g) {
            const int row = (int)((i - i0) * group + g);
            const float* o = s.o + (int64_t)row * dim;
            const __m512 inv = _mm512_set1_ps(1.0f / s.l[row]);
            uint16_t* dst = a.out + ((a.q_start[b] + i) * a.heads + h * group + g) * dim;
            for (int64_t d = 0; d < dim; d += 16) {
                __m256bh y = _mm512_cvtneps_pbh(_mm512_mul_ps(_mm512_loadu_ps(o + d), inv));
                _mm256_storeu_si256((__m256i*)(dst + d), (__m256i)y);
            }
        }
}

}  // namespace

extern "C" {

// q: [T, heads, dim] bf16, q_stride elements from one token to the next; out: the same, contiguous;
// k, v: [pages, page_size, kv_heads, dim] bf16, contiguous; pages: [batch, max_pages]; threads: as
// many as torch's matmuls use. dim must be a multiple of 64, heads a multiple of kv_heads. Returns 0, or -1
// when scratch memory could not be had.
int quail_cpu_attention(const uint16_t* q, const uint16_t* k, const uint16_t* v, uint16_t* out,
                        const int64_t* q_start, const int64_t* q_len, const int64_t* k_len, const int64_t* pages,
                        int64_t batch, int64_t max_pages, int64_t q_stride, int64_t heads, int64_t kv_heads, int64_t dim,
                        int64_t page_size, int64_t rows_per_item, float scale, int threads) {
    Args a{q, k, v, out, q_start, q_len, k_len, pages, max_pages, q_stride, heads, kv_heads, dim, page_size, scale};
    // Work items: (sequence, kv head, block of query rows), numbered in that order
    int64_t* first = (int64_t*)std::malloc(sizeof(int64_t) * (batch + 1));
    if (!first) return -1;
    first[0] = 0;
    for (int64_t b = 0; b < batch; ++b)
        first[b + 1] = first[b] + kv_heads * ((q_len[b] + rows_per_item - 1) / rows_per_item);
    const int64_t items = first[batch];
    const int64_t group = heads / kv_heads, max_rows = rows_per_item * group;
    int failed = 0;
#pragma omp parallel num_threads(threads)
    {
        Scratch s{};
        s.kp = (uint32_t*)std::aligned_alloc(64, sizeof(uint32_t) * (dim / 2) * KB);
        s.vf = (float*)std::aligned_alloc(64, sizeof(float) * KB * dim);
        s.p = (float*)std::aligned_alloc(64, sizeof(float) * ROW_TILE * KB);
        s.o = (float*)std::aligned_alloc(64, sizeof(float) * max_rows * dim);
        s.m = (float*)std::malloc(sizeof(float) * max_rows);
        s.l = (float*)std::malloc(sizeof(float) * max_rows);
        s.last = (int64_t*)std::malloc(sizeof(int64_t) * max_rows);
        s.qrow = (const uint32_t**)std::malloc(sizeof(void*) * max_rows);
        const bool ok = s.kp && s.vf && s.p && s.o && s.m && s.l && s.last && s.qrow;
        if (!ok) {
#pragma omp atomic write
            failed = 1;
        }
        int64_t b = 0;
#pragma omp for schedule(dynamic, 1)
        for (int64_t it = 0; it < items; ++it) {
            if (!ok) continue;
            while (first[b + 1] <= it) ++b;
            while (first[b] > it) --b;
            const int64_t local = it - first[b];
            const int64_t h = local % kv_heads, blk = local / kv_heads;
            const int64_t i0 = blk * rows_per_item;
            const int64_t i1 = i0 + rows_per_item < q_len[b] ? i0 + rows_per_item : q_len[b];
            item(a, s, b, h, i0, i1);
        }
        std::free(s.kp);
        std::free(s.vf);
        std::free(s.p);
        std::free(s.o);
        std::free(s.m);
        std::free(s.l);
        std::free(s.last);
        std::free(s.qrow);
    }
    std::free(first);
    return failed ? -1 : 0;
}
}
