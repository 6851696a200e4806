/*
 * common/crc32c.c: CRC-32C (Castagnoli), pp_crc32c() of pinpipe/common.h.
 * Bit by bit, reflected polynomial 0x82f63b78: its users (TensorBoard's
 * event records) are small.
 */
#include "config.h"

#include "pinpipe/common.h"

static uint32_t crc32c_byte(uint32_t crc, uint8_t b)
{
	crc ^= b;
	for (int k = 0; k < 8; k++)
		crc = (crc >> 1) ^ (0x82f63b78u & (0u - (crc & 1u)));
	return crc;
}

PP_API uint32_t pp_crc32c(uint32_t crc, const void *buf, size_t len)
{
	const uint8_t *p = buf;

	crc = ~crc;
	for (size_t i = 0; i < len; i++)
		crc = crc32c_byte(crc, p[i]);
	return ~crc;
}
