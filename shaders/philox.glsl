// Philox4x32-10 (Random123), the counter-based generator of rand/randn
// (create_random.comp), dropout and multinomial (mask.comp): word q of a
// seed's stream is word q % 4 of philox4x32_10((q / 4, 0, 0, 0), seed).
uvec4 philox4x32_10(uvec4 c, uvec2 k)
{
	for (int r = 0; r < 10; r++) {
		if (r > 0)
			k += uvec2(0x9E3779B9u, 0xBB67AE85u);
		uint hi0, lo0, hi1, lo1;
		umulExtended(0xD2511F53u, c.x, hi0, lo0);
		umulExtended(0xCD9E8D57u, c.z, hi1, lo1);
		c = uvec4(hi1 ^ c.y ^ k.x, lo1, hi0 ^ c.w ^ k.y, lo0);
	}
	return c;
}

// rand's f32 value of a word: its top 24 bits times 2^-24, in [0, 1).
float philox_unit(uint w)
{
	return float(w >> 8) * (1.0 / 16777216.0);
}
