#ifndef PB_MURMUR2_H
#define PB_MURMUR2_H
#include <stddef.h>
#include <stdint.h>

/* Java's Utils.murmur2 (seed 0x9747b28c), the hash Kafka's default partitioner applies to keys.
   Java reads each 4-byte word little-endian. Header-only so every extension may include it
   without clashing symbols. Callers cast the result to int32_t for Java's signed value. */
static inline uint32_t pb_murmur2(const uint8_t *p, size_t n)
{
    const uint32_t m = 0x5bd1e995u;
    uint32_t h = 0x9747b28cu ^ (uint32_t)n;
    size_t words = n >> 2;
    for (size_t i = 0; i < words; i++) {
        const uint8_t *w = p + 4 * i;
        uint32_t k = (uint32_t)w[0] | ((uint32_t)w[1] << 8) | ((uint32_t)w[2] << 16) | ((uint32_t)w[3] << 24);
        k *= m;
        k ^= k >> 24;
        k *= m;
        h = (h * m) ^ k;
    }
    const uint8_t *tail = p + 4 * words;
    switch (n & 3) {
    case 3: h ^= (uint32_t)tail[2] << 16; /* fall through */
    case 2: h ^= (uint32_t)tail[1] << 8;  /* fall through */
    case 1: h ^= tail[0]; h *= m;
    }
    h ^= h >> 13;
    h *= m;
    h ^= h >> 15;
    return h;
}

#endif
