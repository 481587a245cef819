/* CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), as used by Kafka record batches v2.
 *
 * pb_crc32c(crc, p, n) continues a CRC: pb_crc32c(pb_crc32c(0, a), b) == CRC of a||b, and the
 * check value of "123456789" is 0xE3069283. It never touches Python state, so callers may run
 * it with the GIL released. The SSE4.2 instruction is used when the CPU has it (chosen once at
 * load time); otherwise a slicing-by-8 table does the work.
 */
#ifndef PB_CRC32C_HW_H
#define PB_CRC32C_HW_H

#include <stddef.h>
#include <stdint.h>

uint32_t pb_crc32c(uint32_t crc, const uint8_t *p, size_t n);

/* The portable path alone, so tests can check it on machines that have the instruction. */
uint32_t pb_crc32c_sw(uint32_t crc, const uint8_t *p, size_t n);

/* 1 when pb_crc32c uses the hardware instruction. */
int pb_crc32c_hw(void);

#endif
