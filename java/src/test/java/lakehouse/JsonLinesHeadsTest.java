package lakehouse;

import static java.nio.charset.StandardCharsets.UTF_8;
import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.util.MapData;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** JsonLines' wrapped records ({@code {"<head>": {...}, "<body>": {...}}}): Heads, and Counter's heads. */
class JsonLinesHeadsTest {
    static final long V1 = 0x9d243d6e1e08f168L;  // FNV-1a 64 of {"v":1}
    static final long V2 = 0x9d193d6e1dfee9e3L;  // of {"v":2}

    @TempDir
    Path dir;

    private static byte[] bytes(String text) {
        return text.getBytes(UTF_8);
    }

    private static int find(JsonLines.Heads heads, String line) {
        byte[] b = bytes(line);
        return heads.find(b, b.length);
    }

    @Test
    void aHeadsIdIsTheFnv1a64HashOfItsBytes() {
        assertEquals(0xcbf29ce484222325L, JsonLines.Heads.id(new byte[0], 0, 0));
        assertEquals(0xaf63dc4c8601ec8cL, JsonLines.Heads.id(bytes("a"), 0, 1));
        assertEquals(0x85944171f73967e8L, JsonLines.Heads.id(bytes("foobar"), 0, 6));
        assertEquals(0x85944171f73967e8L, JsonLines.Heads.id(bytes("[foobar]"), 1, 7));
        assertEquals(V1, JsonLines.Heads.id(bytes("{\"v\":1}"), 0, 7));
    }

    @Test
    void aHeadFirstRecordIsFoundAtItsBodysBraceWithItsHeadsId() {
        JsonLines.Heads heads = new JsonLines.Heads("schema,payload");
        String line = "{\"schema\":{\"v\":1},\"payload\":{\"a\":\"1\"}}";
        assertEquals(28, find(heads, line));
        assertFalse(heads.bodyFirst);
        assertEquals(V1, heads.id);
        assertEquals(10, heads.schemaFrom);
        assertEquals(17, heads.schemaTo);
        assertArrayEquals(bytes("{\"schema\":{\"v\":1},\"payload\":"), heads.headOf(bytes(line)));

        String spaced = "{ \"schema\" : {\"v\": 2} ,\t\"payload\" : {\"a\":\"1\"}}";
        assertEquals(spaced.indexOf("{\"a\""), find(heads, spaced));
        assertEquals(JsonLines.Heads.id(bytes("{\"v\": 2}"), 0, 8), heads.id);  // its bytes as written
    }

    @Test
    void aBodyFirstRecordIsFoundByItsFirstKeyAndItsTailIsCheckedAfter() {
        JsonLines.Heads heads = new JsonLines.Heads("schema,payload");
        String line = "{\"payload\":{\"a\":\"}\"},\"schema\":{\"v\":1}}";
        byte[] b = bytes(line);
        assertEquals(11, heads.find(b, b.length));
        assertTrue(heads.bodyFirst);
        int end = JsonLines.Heads.objectEnd(b, 11, b.length);
        assertEquals(20, end);  // past the body's closing brace, not the one in its string
        assertTrue(heads.tail(b, end, b.length));
        assertEquals(V1, heads.id);
        assertEquals(JsonLines.Heads.RECENT, heads.slot);  // the first tail kept
        assertArrayEquals(bytes("{\"schema\":{\"v\":1},\"payload\":"), heads.headOf(b));  // as written head first

        for (String tail : List.of(",\"schema\":{\"v\":1},\"x\":1}", ",\"other\":{\"v\":1}}", ",\"schema\":1}",
                ",\"schema\":{\"v\":1}} ,", "}")) {
            byte[] other = bytes("{\"payload\":{\"a\":\"1\"}" + tail);
            assertEquals(11, heads.find(other, other.length));
            assertFalse(heads.tail(other, 20, other.length), tail);
        }
    }

    @Test
    void aLineThatIsNoWrappedRecordIsFoundAtZero() {
        JsonLines.Heads heads = new JsonLines.Heads("schema,payload");
        for (String line : List.of("", "[]", "{}", "{\"a\":1}", "{\"schema\":1,\"payload\":{}}",
                "{\"schema\":{},\"other\":{}}", "{\"schema\":{}}", "{\"schema\":{},\"payload\":[1]}",
                "{\"schemas\":{},\"payload\":{}}", "{\"schema\":{},\"payloads\":{}}", "{\"payload\":\"x\"}",
                "{\"schema\":{} \"payload\":{}}", "{\"x\":{},\"schema\":{},\"payload\":{}}")) {
            assertEquals(0, find(heads, line), line);
        }
    }

    @Test
    void aLineBeginningWithOneOfTheLastEightHeadsIsNotReadAgain() {
        JsonLines.Heads heads = new JsonLines.Heads("schema,payload");
        String v1 = "{\"schema\":{\"v\":1},\"payload\":";
        assertEquals(28, find(heads, v1 + "{\"a\":\"1\"}}"));
        assertEquals(10, heads.schemaFrom);  // read
        assertEquals(0, heads.slot);
        assertEquals(28, find(heads, v1 + "{\"a\":\"2\"}}"));
        assertEquals(-1, heads.schemaFrom);  // known: not read again
        assertEquals(V1, heads.id);
        assertEquals(0, heads.slot);

        assertEquals(28, find(heads, "{\"schema\":{\"v\":2},\"payload\":{}}"));
        assertEquals(V2, heads.id);
        assertEquals(1, heads.slot);
        for (int v = 3; v <= JsonLines.Heads.RECENT; v++) {
            find(heads, "{\"schema\":{\"v\":" + v + "},\"payload\":{}}");
            assertEquals(v - 1, heads.slot);
        }
        assertEquals(28, find(heads, v1 + "{}}"));  // seven other heads since: still known
        assertEquals(-1, heads.schemaFrom);
        assertEquals(V1, heads.id);
        assertEquals(0, heads.slot);

        find(heads, "{\"schema\":{\"v\":9},\"payload\":{}}");  // the eighth takes the eldest's place
        assertEquals(0, heads.slot);
        assertEquals(28, find(heads, v1 + "{}}"));
        assertEquals(10, heads.schemaFrom);  // forgotten: read anew
        assertEquals(V1, heads.id);
        assertEquals(1, heads.slot);

        heads.reset();  // a new split finds its own
        find(heads, v1 + "{}}");
        assertEquals(10, heads.schemaFrom);
        assertEquals(0, heads.slot);
    }

    @Test
    void theHeadOptionIsTwoNames() {
        IllegalArgumentException refused = assertThrows(IllegalArgumentException.class,
            () -> new JsonLines.Heads("schema"));
        assertEquals("JsonLines: the head option is two field names, <head>,<body>", refused.getMessage());
        JsonLines.Heads heads = new JsonLines.Heads("h,b,c");
        assertEquals("h", heads.headName);
        assertEquals("b,c", heads.bodyName);
    }

    @Test
    void aSplitsLinesAreCountedUnderTheHeadTheyBeginWithAsWrittenHeadFirst() throws IOException {
        String v1 = "{\"schema\":{\"v\":1},\"payload\":";
        String v2 = "{\"schema\":{\"v\":2},\"payload\":";
        Path path = dir.resolve("f.jsonl");
        Files.write(path, bytes(String.join("\n", v1 + "{\"a\":1}}", v2 + "{}}", v1 + "{}}",
            "{\"payload\":{\"a\":1},\"schema\":{\"v\":1}}", "{\"payload\":{},\"schema\":{\"v\":2},\"x\":1}",
            "{\"a\":1}", "", v1 + "{}}") + "\n"));
        InternalRow row = count(path, 1);
        assertEquals(8, row.getLong(1));
        assertEquals(Map.of(v1, 4L, v2, 1L), heads(row.getMap(2)));
    }

    @Test
    void atMostSixtyFourHeadsAreListedAndTheLinesOfOthersAreCountedOnly() throws IOException {
        StringBuilder text = new StringBuilder();
        for (int v = 0; v < JsonLines.Counter.MAX_HEADS + 2; v++) {
            text.append("{\"schema\":{\"v\":").append(v).append("},\"payload\":{}}\n");
        }
        text.append("{\"schema\":{\"v\":0},\"payload\":{}}\n");  // a listed head, again
        text.append("{\"schema\":{\"v\":65},\"payload\":{}}\n");  // one not listed, again
        Path path = dir.resolve("f.jsonl");
        Files.write(path, bytes(text.toString()));
        InternalRow row = count(path, 0);
        assertEquals(68, row.getLong(1));
        Map<String, Long> heads = heads(row.getMap(2));
        assertEquals(64, heads.size());
        assertEquals(2L, heads.get("{\"schema\":{\"v\":0},\"payload\":"));
        assertEquals(1L, heads.get("{\"schema\":{\"v\":63},\"payload\":"));
        assertFalse(heads.containsKey("{\"schema\":{\"v\":64},\"payload\":"));
    }

    @Test
    void eachSplitCountsTheHeadsOfItsOwnLines() throws IOException {
        String line = "{\"schema\":{\"v\":1},\"payload\":{}}\n";  // 31 bytes
        Path path = dir.resolve("f.jsonl");
        Files.write(path, bytes(line.repeat(5)));
        JsonLines.Split[] splits = {JsonLinesLinesTest.split(0, path, 0, 62, 0, null),
            JsonLinesLinesTest.split(1, path, 62, -1, 2, null)};
        JsonLines.Counter counter = new JsonLines.Counter(JsonLinesLinesTest.CONF, splits,
            new JsonLines.Heads("schema,payload"));
        String head = "{\"schema\":{\"v\":1},\"payload\":";
        assertTrue(counter.next());
        assertEquals(2, counter.get().getLong(1));
        assertEquals(Map.of(head, 2L), heads(counter.get().getMap(2)));
        assertTrue(counter.next());
        assertEquals(1, counter.get().getInt(0));
        assertEquals(3, counter.get().getLong(1));
        assertEquals(Map.of(head, 3L), heads(counter.get().getMap(2)));
        assertFalse(counter.next());
    }

    private static InternalRow count(Path path, int index) throws IOException {
        JsonLines.Split split = JsonLinesLinesTest.split(index, path, 0, -1, 0, null);
        JsonLines.Counter counter = new JsonLines.Counter(JsonLinesLinesTest.CONF, new JsonLines.Split[] {split},
            new JsonLines.Heads("schema,payload"));
        assertTrue(counter.next());
        InternalRow row = counter.get();
        assertEquals(index, row.getInt(0));
        assertFalse(counter.next());
        return row;
    }

    private static Map<String, Long> heads(MapData map) {
        Map<String, Long> out = new LinkedHashMap<>();
        for (int i = 0; i < map.numElements(); i++) {
            out.put(map.keyArray().getUTF8String(i).toString(), map.valueArray().getLong(i));
        }
        return out;
    }
}
