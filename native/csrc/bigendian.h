#ifndef PB_BIGENDIAN_H
#define PB_BIGENDIAN_H
#include <stdint.h>

/* Kafka's wire and file formats are big-endian. */
static inline int64_t pb_get64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v = (v << 8) | p[i];
    return (int64_t)v;
}
static inline int32_t pb_get32(const uint8_t *p)
{
    return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3]);
}
static inline int16_t pb_get16(const uint8_t *p) { return (int16_t)((p[0] << 8) | p[1]); }
static inline void pb_put64(uint8_t *p, int64_t v)
{
    for (int i = 7; i >= 0; i--) { p[i] = (uint8_t)v; v = (int64_t)((uint64_t)v >> 8); }
}
static inline void pb_put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24); p[1] = (uint8_t)(v >> 16); p[2] = (uint8_t)(v >> 8); p[3] = (uint8_t)v;
}
static inline void pb_put16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)(v >> 8); p[1] = (uint8_t)v; }

#endif
