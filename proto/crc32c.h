/* CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), the checksum of
 * iSCSI, ext4 and the tensord checkpoint files (docs/durability.md). */
#pragma once

#include <stddef.h>
#include <stdint.h>

/* Continue the CRC-32C `crc` (0 to start) over `n` bytes at `p`:
 * tdp_crc32c(0, "123456789", 9) == 0xE3069283. */
uint32_t tdp_crc32c(uint32_t crc, const void *p, size_t n);
