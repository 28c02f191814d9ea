"""A PNG reader independent of the writer (no matplotlib, no PIL): the file is
valid when it has the PNG signature, every chunk's CRC is right, IHDR comes
first and IEND last, and the zlib stream of the IDAT chunks inflates to exactly
height scanlines of (1 filter byte + width * bytes per pixel) each."""
import struct
import zlib

SIGNATURE = b"\x89PNG\r\n\x1a\n"
# colour type -> samples per pixel
SAMPLES = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}


def check_png(data):
    """Returns (width, height) of the PNG in `data`; raises ValueError saying
    what is wrong otherwise."""
    if not data.startswith(SIGNATURE):
        raise ValueError("no PNG signature")
    pos, chunks, idat = len(SIGNATURE), [], b""
    while pos < len(data):
        if pos + 12 > len(data):
            raise ValueError("truncated chunk header at byte %d" % pos)
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if len(body) != length or pos + 12 + length > len(data):
            raise ValueError("truncated %r chunk" % kind)
        (crc,) = struct.unpack(">I", data[pos + 8 + length:pos + 12 + length])
        if zlib.crc32(kind + body) & 0xffffffff != crc:
            raise ValueError("bad CRC in the %r chunk" % kind)
        chunks.append(kind)
        if kind == b"IHDR":
            width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    if not chunks or chunks[0] != b"IHDR" or chunks[-1] != b"IEND" or b"IDAT" not in chunks:
        raise ValueError("chunks out of order: %r" % chunks)
    if width == 0 or height == 0 or colour not in SAMPLES or interlace != 0:
        raise ValueError("unexpected IHDR: %dx%d colour %d interlace %d" % (width, height, colour, interlace))
    row = 1 + (width * SAMPLES[colour] * depth + 7) // 8
    raw = zlib.decompress(idat)
    if len(raw) != height * row:
        raise ValueError("image data of %d bytes, want %d x %d" % (len(raw), height, row))
    if any(raw[i * row] > 4 for i in range(height)):
        raise ValueError("a scanline with an unknown filter type")
    return width, height
