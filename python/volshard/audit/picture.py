"""The audit's picture, drawn as ``sampler-inspect --png`` draws a sampler's
(tools/sampler-inspect/src/assignment_png.cpp): per loader, one row per epoch,
one cell per sample index, coloured by the rank that read it (the lowest, when
several did); a white dot marks a sample read more than once in the epoch, a
crossed light-grey cell one that no rank read, dark grey one read before a
resume. Pure Python (zlib and struct): the audit runs without the compiled
module."""

import struct
import zlib

# core/src/png.cpp's kFont5x7 (' ' .. '~', five column bytes per glyph, bit 0
# the top row), copied: the audit needs no compiled code. tests/audit's
# test_picture_font_is_cores keeps the two equal.
FONT_5X7 = bytes.fromhex(
    "000000000000005f00000007000700147f147f14242a7f2a12231308646236495522500005030000001c2241000041221c00"
    "14083e081408083e080800503000000808080808006060000020100804023e5149453e00427f400042615149462141454b31"
    "1814127f1027454545393c4a49493001710905033649494936064949291e0036360000005636000008142241001414141414"
    "00412214080201510906324979413e7e1111117e7f494949363e414141227f4141221c7f494949417f090909013e4149497a"
    "7f0808087f00417f41002040413f017f081422417f404040407f020c027f7f0408107f3e4141413e7f090909063e4151215e"
    "7f09192946464949493101017f01013f4040403f1f2040201f3f4038403f631408146307087008076151494543007f414100"
    "02040810200041417f0004020102044040404040000102040020545454787f484444383844444420384444487f3854545418"
    "087e09010218a4a4a47c7f0804047800447d40004080847d007f1028440000417f40007c041804787c080404783844444438"
    "fc2424241818242418fc7c080404084854545420043f4440203c4040207c1c2040201c3c4030403c44281028441ca0a0a07c"
    "4464544c44000836410000007f000000413608000804081008")

MAX_COLUMNS = 4096
_LABEL_WIDTH = 80
_ROW_HEIGHT = 26
_TITLE_HEIGHT = 22
_LEGEND_HEIGHT = 30
_MARGIN = 6
_TAB10 = [(31, 119, 180), (255, 127, 14), (44, 160, 44), (214, 39, 40), (148, 103, 189), (140, 86, 75),
          (227, 119, 194), (127, 127, 127), (188, 189, 34), (23, 190, 207)]
_UNREAD = (220, 220, 220)
_BEFORE = (90, 90, 90)


def rank_colour(rank):
    """tab10 for the first ten ranks, then hues as assignment_png.cpp cycles them."""
    if rank < 10:
        return _TAB10[rank]
    h, v = ((rank * 74) % 360) / 60.0, 220.0
    c = v * 200 / 255
    x = c * (1 - abs(h % 2.0 - 1))
    m = v - c
    r, g, b = [(c, x, 0), (x, c, 0), (0, c, x), (0, x, c), (x, 0, c), (c, 0, x)][min(int(h), 5)]
    return int(r + m), int(g + m), int(b + m)


class Canvas:
    def __init__(self, width, height):
        self.width, self.height = width, height
        self.rgb = bytearray(b"\xff" * (width * height * 3))

    def set(self, x, y, c):
        if 0 <= x < self.width and 0 <= y < self.height:
            o = (y * self.width + x) * 3
            self.rgb[o:o + 3] = bytes(c)

    def fill_rect(self, x, y, w, h, c):
        x0, y0, x1, y1 = max(x, 0), max(y, 0), min(x + w, self.width), min(y + h, self.height)
        if x0 >= x1:
            return
        row = bytes(c) * (x1 - x0)
        for yy in range(y0, y1):
            o = (yy * self.width + x0) * 3
            self.rgb[o:o + len(row)] = row

    def line(self, x0, y0, x1, y1, c):
        dx, dy = abs(x1 - x0), -abs(y1 - y0)
        sx, sy = (1 if x0 < x1 else -1), (1 if y0 < y1 else -1)
        err = dx + dy
        while True:
            self.set(x0, y0, c)
            if x0 == x1 and y0 == y1:
                break
            e2 = 2 * err
            if e2 >= dy:
                err += dy
                x0 += sx
            if e2 <= dx:
                err += dx
                y0 += sy

    def fill_circle(self, cx, cy, radius, c):
        for y in range(-radius, radius + 1):
            for x in range(-radius, radius + 1):
                if x * x + y * y <= radius * radius + radius:
                    self.set(cx + x, cy + y, c)

    def text(self, x, y, s, c=(30, 30, 30)):
        """Text with its baseline at y, 5x7 glyphs."""
        pen, top = x, y - 7
        for ch in s:
            code = ord(ch) if 32 <= ord(ch) < 127 else ord("?")
            glyph = FONT_5X7[(code - 32) * 5:(code - 32) * 5 + 5]
            for col in range(5):
                for row in range(8):
                    if (glyph[col] >> row) & 1:
                        self.set(pen + col, top + row, c)
            pen += 6
        return pen - x

    def png(self):
        raw = b"".join(b"\x00" + bytes(self.rgb[y * self.width * 3:(y + 1) * self.width * 3])
                       for y in range(self.height))

        def chunk(kind, data):
            body = kind + data
            return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body) & 0xFFFFFFFF)

        header = struct.pack(">IIBBBBB", self.width, self.height, 8, 2, 0, 0, 0)
        return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw, 9)) + \
            chunk(b"IEND", b"")


def drawable(section):
    n = section["size"]
    return n is not None and 1 <= n <= MAX_COLUMNS


def draw(sections, world_size):
    """sections: [{"title", "size", "rows": [{"label", "shards": {rank: [indices]}, "before": [indices]}]}]
    (loaders whose size is unknown or above MAX_COLUMNS are left out). Returns PNG bytes, or None when no
    section can be drawn."""
    sections = [s for s in sections if drawable(s) and s["rows"]]
    if not sections:
        return None
    widest = max(s["size"] for s in sections)
    cell = max(3, min(28, 1400 // widest))
    width = max(_LABEL_WIDTH + widest * cell + _MARGIN, 520)
    height = _LEGEND_HEIGHT + sum(_TITLE_HEIGHT + len(s["rows"]) * _ROW_HEIGHT for s in sections) + _MARGIN
    img = Canvas(width, height)
    x = _MARGIN
    for r in range(min(world_size, 16)):
        img.fill_rect(x, 8, 14, 14, rank_colour(r))
        img.text(x + 17, 20, f"r{r}")
        x += 48
    if world_size > 16:
        img.text(x, 20, "...")
        x += 30
    img.fill_circle(x + 7, 15, 3, (0, 0, 0))
    img.text(x + 14, 20, "read twice")
    x += 84
    img.fill_rect(x, 8, 14, 14, _UNREAD)
    img.text(x + 17, 20, "unread")
    x += 66
    if any(row.get("before") for s in sections for row in s["rows"]):
        img.fill_rect(x, 8, 14, 14, _BEFORE)
        img.text(x + 17, 20, "read before resume")
    y = _LEGEND_HEIGHT
    for s in sections:
        img.text(_MARGIN, y + 15, s["title"][:(width - 2 * _MARGIN) // 6])
        y += _TITLE_HEIGHT
        n = s["size"]
        for row in s["rows"]:
            img.text(_MARGIN, y + _ROW_HEIGHT // 2 + 5, row["label"][:12])
            owner, reads = [-1] * n, [0] * n
            before = [False] * n
            for i in row.get("before", []):
                if isinstance(i, int) and 0 <= i < n:
                    before[i] = True
            for r in sorted(row["shards"], reverse=True):
                for i in row["shards"][r]:
                    if isinstance(i, int) and 0 <= i < n:
                        owner[i] = r
                        reads[i] += 1
            for i in range(n):
                bx, by = _LABEL_WIDTH + i * cell, y + 2
                bw, bh = max(cell - 1, 1), _ROW_HEIGHT - 4
                if before[i]:
                    img.fill_rect(bx, by, bw, bh, _BEFORE)
                elif owner[i] < 0:
                    img.fill_rect(bx, by, bw, bh, _UNREAD)
                    img.line(bx, by, bx + bw - 1, by + bh - 1, (120, 120, 120))
                else:
                    img.fill_rect(bx, by, bw, bh, rank_colour(owner[i]))
                if reads[i] + (1 if before[i] else 0) > 1:
                    img.fill_circle(bx + bw // 2, by + bh // 2, max(1, min(cell // 4, 4)), (255, 255, 255))
            y += _ROW_HEIGHT
    return img.png()
