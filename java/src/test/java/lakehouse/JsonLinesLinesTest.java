package lakehouse;

import static java.nio.charset.StandardCharsets.ISO_8859_1;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.io.OutputStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.zip.GZIPOutputStream;

import com.fasterxml.jackson.databind.node.ArrayNode;

import org.apache.hadoop.conf.Configuration;
import org.apache.spark.sql.catalyst.InternalRow;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * JsonLines' line reader (LineSource, and Counter's count of it): how a split's bytes become lines.
 */
class JsonLinesLinesTest {
    static final Configuration CONF = new Configuration();

    @TempDir
    Path dir;


    /** Bytes written as Latin-1 text: each char one byte, so that any byte can be written and read back. */
    private Path file(String name, String latin1) throws IOException {
        Path path = dir.resolve(name);
        Files.write(path, latin1.getBytes(ISO_8859_1));
        return path;
    }

    static JsonLines.Split split(int index, Path path, long start, long end, long before, Integer day) {
        ArrayNode node = JsonLines.MAPPER.createArrayNode().add(path.toString()).add(start).add(end).add(before);
        if (day == null) {
            node.addNull();
        } else {
            node.add(day);
        }
        return new JsonLines.Split(index, node);
    }

    /** The lines of bytes [start, end) of the file, each as Latin-1 text of its bytes. */
    private static List<String> lines(Path path, long start, long end) throws IOException {
        List<String> out = new ArrayList<>();
        try (JsonLines.LineSource source = new JsonLines.LineSource(CONF, split(0, path, start, end, 0, null))) {
            while (source.next(true)) {
                out.add(new String(source.line, 0, source.length, ISO_8859_1));
            }
        }
        return out;
    }

    private static List<String> lines(Path path) throws IOException {
        return lines(path, 0, -1);
    }

    /** Counter's row for each split: {split index, lines}. */
    private static List<List<Long>> counts(JsonLines.Split... splits) throws IOException {
        List<List<Long>> out = new ArrayList<>();
        JsonLines.Counter counter = new JsonLines.Counter(CONF, splits, null);
        while (counter.next()) {
            InternalRow row = counter.get();
            out.add(List.of((long) row.getInt(0), row.getLong(1)));
        }
        return out;
    }

    @Test
    void linesAreSplitOnNewlineAndAFinalNewlineStartsNoLine() throws IOException {
        assertEquals(List.of("a", "bb", "ccc"), lines(file("f", "a\nbb\nccc\n")));
        assertEquals(List.of(), lines(file("empty", "")));
    }

    @Test
    void aLastLineWithoutNewlineIsALine() throws IOException {
        assertEquals(List.of("a", "bb"), lines(file("f", "a\nbb")));
        assertEquals(List.of("x"), lines(file("one", "x")));
    }

    @Test
    void emptyLinesAreLinesOfTheirOwn() throws IOException {
        assertEquals(List.of("a", "", "", "b"), lines(file("f", "a\n\n\nb\n")));
        assertEquals(List.of(""), lines(file("newline", "\n")));
        assertEquals(List.of("", ""), lines(file("two", "\n\n")));
    }

    @Test
    void oneFinalCarriageReturnIsDroppedAndOthersAreKept() throws IOException {
        assertEquals(List.of("a", "b\r", "c", "d\re"), lines(file("f", "a\r\nb\r\r\nc\r\nd\re")));
        assertEquals(List.of("x"), lines(file("last", "x\r")));
        assertEquals(List.of(""), lines(file("alone", "\r\n")));
    }

    @Test
    void aByteOrderMarkIsDroppedAtTheFileStartOnly() throws IOException {
        String bom = "\u00ef\u00bb\u00bf";
        assertEquals(List.of("a", bom + "b"), lines(file("f", bom + "a\n" + bom + "b\n")));
        assertEquals(List.of(""), lines(file("bom-only", bom)));
        // a split that does not start the file does not look for one
        Path later = file("later", "x\n" + bom + "y\n");
        assertEquals(List.of(bom + "y"), lines(later, 2, -1));
    }

    @Test
    void aLineLongerThanTheChunkAndTheLineBufferIsReadWhole() throws IOException {
        String longLine = "x".repeat(200_000) + "y";  // past the 64 KiB chunk and the 1 KiB line buffer, thrice
        List<String> read = lines(file("f", "a\n" + longLine + "\r\nend"));
        assertEquals(3, read.size());
        assertEquals("a", read.get(0));
        assertEquals(longLine.length(), read.get(1).length());
        assertTrue(longLine.equals(read.get(1)), "the long line's bytes");  // (not printed whole when it fails)
        assertEquals("end", read.get(2));
    }

    @Test
    void invalidUtf8BytesArePassedOnAsTheyAre() throws IOException {
        String bytes = "\u00c3\u0028\u00ff\u00fe\u0080";  // a broken two-byte sequence, 0xff, 0xfe, a lone continuation
        String json = "{\"a\":\"" + bytes + "\"}";
        assertEquals(List.of(json, bytes), lines(file("f", json + "\n" + bytes)));
    }

    @Test
    void aLineBelongsToTheSplitItsFirstByteIsIn() throws IOException {
        Path path = file("f", "aa\nbb\ncc\n");  // lines start at bytes 0, 3 and 6
        assertEquals(List.of("aa"), lines(path, 0, 3));
        assertEquals(List.of("aa", "bb"), lines(path, 0, 4));
        assertEquals(List.of("bb"), lines(path, 1, 4));
        assertEquals(List.of("bb", "cc"), lines(path, 3, 9));
        assertEquals(List.of("cc"), lines(path, 4, -1));
        assertEquals(List.of(), lines(path, 7, -1));
        assertEquals(List.of(), lines(path, 4, 6));
    }

    @Test
    void anyTwoAdjacentSplitsReadEachLineOnceAndCountTheSame() throws IOException {
        String text = "a\r\n\nbbb\nc\r\n\r\ndddd\ne";
        Path path = file("f", text);
        List<String> whole = List.of("a", "", "bbb", "c", "", "dddd", "e");
        assertEquals(whole, lines(path));
        for (int cut = 0; cut <= text.length(); cut++) {
            List<String> both = new ArrayList<>(lines(path, 0, cut));
            int first = both.size();
            both.addAll(lines(path, cut, -1));
            assertEquals(whole, both, "cut at " + cut);
            assertEquals(List.of(List.of(0L, (long) first), List.of(1L, (long) (whole.size() - first))),
                counts(split(0, path, 0, cut, 0, null), split(1, path, cut, -1, 0, null)), "cut at " + cut);
        }
    }

    @Test
    void aCompressedFileIsReadWholeAndOnlyWhole() throws IOException {
        Path path = dir.resolve("f.jsonl.gz");
        try (OutputStream out = new GZIPOutputStream(Files.newOutputStream(path))) {
            out.write("\u00ef\u00bb\u00bfa\r\nb\n\nc".getBytes(ISO_8859_1));
        }
        assertEquals(List.of("a", "b", "", "c"), lines(path));
        IOException split = assertThrows(IOException.class, () -> lines(path, 0, 10));
        assertEquals(path + ": a compressed file is read whole", split.getMessage());
        assertThrows(IOException.class, () -> lines(path, 5, -1));
    }
}
