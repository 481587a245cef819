/* CRC-32C: SSE4.2 crc32 instruction with three interleaved streams, or slicing-by-8 tables.
 *
 * All arithmetic is on the "raw" register (no pre/post inversion); pb_crc32c adds the
 * inversions. Streams are joined with zero-extension operators: the raw CRC is linear, so
 * raw(s, A||B) == shift_|B|(raw(s, A)) ^ raw(0, B), where shift_L appends L zero bytes.
 */
#include "crc32c_hw.h"

#if defined(__x86_64__) || defined(__i386__)
#include <nmmintrin.h>
#define PB_HAVE_X86 1
#endif

#define POLY 0x82F63B78u
#define LONG_BLOCK 4096 /* per-stream bytes in the long 3-way loop */
#define SHORT_BLOCK 256 /* per-stream bytes in the short 3-way loop */

static uint32_t sw_table[8][256];     /* sw_table[k][b]: raw CRC of byte b then k zero bytes */
static uint32_t long_shift[4][256];   /* appends LONG_BLOCK zero bytes, one table per input byte */
static uint32_t short_shift[4][256];  /* appends SHORT_BLOCK zero bytes */
static int use_hw;

static inline uint64_t load_le64(const uint8_t *p)
{
    /* byte-wise assembly keeps big-endian hosts correct; compilers fold it into one load */
    return (uint64_t)p[0] | (uint64_t)p[1] << 8 | (uint64_t)p[2] << 16 | (uint64_t)p[3] << 24 |
           (uint64_t)p[4] << 32 | (uint64_t)p[5] << 40 | (uint64_t)p[6] << 48 | (uint64_t)p[7] << 56;
}

static uint32_t sw_raw(uint32_t crc, const uint8_t *p, size_t n)
{
    while (n >= 8) {
        uint64_t w = load_le64(p) ^ crc;
        crc = sw_table[7][w & 0xff] ^ sw_table[6][(w >> 8) & 0xff] ^
              sw_table[5][(w >> 16) & 0xff] ^ sw_table[4][(w >> 24) & 0xff] ^
              sw_table[3][(w >> 32) & 0xff] ^ sw_table[2][(w >> 40) & 0xff] ^
              sw_table[1][(w >> 48) & 0xff] ^ sw_table[0][w >> 56];
        p += 8;
        n -= 8;
    }
    while (n--)
        crc = sw_table[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
    return crc;
}

static inline uint32_t shift(const uint32_t t[4][256], uint32_t crc)
{
    return t[0][crc & 0xff] ^ t[1][(crc >> 8) & 0xff] ^ t[2][(crc >> 16) & 0xff] ^ t[3][crc >> 24];
}

static void make_shift(uint32_t t[4][256], size_t zeros)
{
    uint32_t basis[32];
    for (int i = 0; i < 32; i++) {
        uint32_t c = 1u << i;
        for (size_t k = 0; k < zeros; k++)
            c = sw_table[0][c & 0xff] ^ (c >> 8);
        basis[i] = c;
    }
    for (int k = 0; k < 4; k++)
        for (int b = 0; b < 256; b++) {
            uint32_t v = 0;
            for (int i = 0; i < 8; i++)
                if (b >> i & 1)
                    v ^= basis[8 * k + i];
            t[k][b] = v;
        }
}

#ifdef PB_HAVE_X86
#if defined(__x86_64__)
#define CRC_WORD(c, p) ((c) = _mm_crc32_u64((c), load_le64(p)))
#define WORD 8
typedef uint64_t crcreg;
#else
#define CRC_WORD(c, p) ((c) = _mm_crc32_u32((c), (uint32_t)load_le64(p)))
#define WORD 4
typedef uint32_t crcreg;
#endif

/* Three independent streams hide the instruction's 3-cycle latency (throughput is 1/cycle). */
#define THREE_WAY(BLOCK, TABLE)                                                   \
    while (n >= 3 * (BLOCK)) {                                                    \
        crcreg c1 = 0, c2 = 0;                                                    \
        const uint8_t *stop = p + (BLOCK);                                        \
        do {                                                                      \
            CRC_WORD(c0, p);                                                      \
            CRC_WORD(c1, p + (BLOCK));                                            \
            CRC_WORD(c2, p + 2 * (BLOCK));                                        \
            p += WORD;                                                            \
        } while (p < stop);                                                       \
        c0 = shift(TABLE, (uint32_t)c0) ^ (uint32_t)c1;                           \
        c0 = shift(TABLE, (uint32_t)c0) ^ (uint32_t)c2;                           \
        p += 2 * (BLOCK);                                                         \
        n -= 3 * (BLOCK);                                                         \
    }

__attribute__((target("sse4.2")))
static uint32_t hw_raw(uint32_t crc, const uint8_t *p, size_t n)
{
    crcreg c0 = crc;
    THREE_WAY(LONG_BLOCK, long_shift)
    THREE_WAY(SHORT_BLOCK, short_shift)
    while (n >= WORD) {
        CRC_WORD(c0, p);
        p += WORD;
        n -= WORD;
    }
    while (n--)
        c0 = _mm_crc32_u8((uint32_t)c0, *p++);
    return (uint32_t)c0;
}
#endif

/* Runs at load time, before any caller can reach pb_crc32c: no locking needed. */
__attribute__((constructor))
static void crc32c_init(void)
{
    for (uint32_t b = 0; b < 256; b++) {
        uint32_t c = b;
        for (int i = 0; i < 8; i++)
            c = (c & 1) ? (c >> 1) ^ POLY : c >> 1;
        sw_table[0][b] = c;
    }
    for (int k = 1; k < 8; k++)
        for (int b = 0; b < 256; b++)
            sw_table[k][b] = sw_table[0][sw_table[k - 1][b] & 0xff] ^ (sw_table[k - 1][b] >> 8);
#ifdef PB_HAVE_X86
    __builtin_cpu_init();  /* required before __builtin_cpu_supports inside a constructor */
    if (__builtin_cpu_supports("sse4.2")) {
        make_shift(long_shift, LONG_BLOCK);
        make_shift(short_shift, SHORT_BLOCK);
        use_hw = 1;
    }
#endif
}

uint32_t pb_crc32c(uint32_t crc, const uint8_t *p, size_t n)
{
#ifdef PB_HAVE_X86
    if (use_hw)
        return ~hw_raw(~crc, p, n);
#endif
    return ~sw_raw(~crc, p, n);
}

uint32_t pb_crc32c_sw(uint32_t crc, const uint8_t *p, size_t n)
{
    return ~sw_raw(~crc, p, n);
}

int pb_crc32c_hw(void)
{
    return use_hw;
}
