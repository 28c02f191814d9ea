// bench/gemm_variants.py's rasterisation variant of the product kernels
// (CM_RASTER in matmul_cm.glsl, MM_RASTER in matmul_v4.glsl; neither is in a
// shipped module): tile `tile` of a grid of tiles_mn tiles, tiles_n to a row,
// as (tile row, tile column), the grid walked in groups of g tile rows (fewer
// in the last), column by column inside a group, so that neighbouring
// workgroups share the second operand's tile columns in L2.
uvec2 tile_raster(uint tile, uint tiles_n, uint tiles_mn, uint g)
{
	uint tiles_m = tiles_mn / tiles_n, grp = tile / (g * tiles_n);
	uint grows = min(g, tiles_m - grp * g);
	uint tin = tile - grp * g * tiles_n;
	return uvec2(grp * g + tin % grows, tin / grows);
}
