package lakehouse;

import static java.nio.charset.StandardCharsets.ISO_8859_1;
import static java.nio.charset.StandardCharsets.UTF_8;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.util.ArrayData;
import org.apache.spark.sql.catalyst.util.MapData;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * JsonLines' parse of a line into the fields asked for (Reader, Shape) and the table schema it reads into.
 */
class JsonLinesParseTest {
    // A line's row: source_file 0, source_line 1, landing_date 2, payload 3, _json (the fields) 4, _json_ok 5,
    // _json_keys 6, with a head _json_head 7, _json_schema 8.
    private StructType fields;

    @TempDir
    Path dir;

    @BeforeEach
    void dataTypes() {
        fields = new StructType()
            .add("t", DataTypes.StringType)
            .add("m", DataTypes.createMapType(DataTypes.StringType, DataTypes.StringType))
            .add("s", new StructType().add("x", DataTypes.StringType)
                .add("y", new StructType().add("deep", DataTypes.StringType)))
            .add("_corrupt_record", DataTypes.StringType);
    }

    private List<InternalRow> read(String latin1, StructType parsed, String head, long before, Integer day)
            throws IOException {
        Path path = dir.resolve("f.jsonl");
        Files.write(path, latin1.getBytes(ISO_8859_1));
        JsonLines.Split[] splits = {JsonLinesLinesTest.split(0, path, 0, -1, before, day)};
        List<InternalRow> rows = new ArrayList<>();
        JsonLines.Reader reader = new JsonLines.Reader(JsonLinesLinesTest.CONF, splits, parsed, head);
        try {
            while (reader.next()) {
                rows.add(reader.get());
            }
        } finally {
            reader.close();
        }
        return rows;
    }

    private InternalRow one(String line) throws IOException {
        List<InternalRow> rows = read(line + "\n", fields, null, 0, null);
        assertEquals(1, rows.size());
        return rows.get(0);
    }

    private static List<String> texts(ArrayData array) {
        List<String> out = new ArrayList<>();
        for (int i = 0; i < array.numElements(); i++) {
            out.add(array.isNullAt(i) ? null : array.getUTF8String(i).toString());
        }
        return out;
    }

    private static String text(InternalRow row, int i) {
        return row.isNullAt(i) ? null : row.getUTF8String(i).toString();
    }

    @Test
    void eachLineHasItsFileItsNumberAfterTheLinesBeforeItsDayAndItsBytes() throws IOException {
        List<InternalRow> rows = read("first\n\n{\"t\":\"\u00ff\"}\r\n", null, null, 41, 19_000);
        assertEquals(3, rows.size());
        Path path = dir.resolve("f.jsonl");
        for (int i = 0; i < 3; i++) {
            assertEquals(4, rows.get(i).numFields());
            assertEquals(path.toString(), rows.get(i).getUTF8String(0).toString());
            assertEquals(42 + i, rows.get(i).getInt(1));
            assertEquals(19_000, rows.get(i).getInt(2));
        }
        assertEquals("first", rows.get(0).getUTF8String(3).toString());
        assertEquals("", rows.get(1).getUTF8String(3).toString());
        assertTrue(Arrays.equals("{\"t\":\"\u00ff\"}".getBytes(ISO_8859_1), rows.get(2).getUTF8String(3).getBytes()));
        assertTrue(read("x\n", null, null, 0, null).get(0).isNullAt(2));  // no landing day
    }

    @Test
    void fieldsAreTextAsFromJsonMakesItAndTheOtherTopLevelKeysAreListed() throws IOException {
        InternalRow row = one("{\"z\":1,\"t\":{\"x\": [1, 2]},\"m\":{\"k\":\"v\",\"n\":2,\"o\":null},"
            + "\"s\":{\"x\":\"1\",\"extra\":3,\"y\":{\"deep\":\"d\"}},\"a\":[]}");
        assertTrue(row.getBoolean(5));
        InternalRow values = row.getStruct(4, 4);
        assertEquals("{\"x\":[1,2]}", text(values, 0));
        MapData map = values.getMap(1);
        assertEquals(List.of("k", "n", "o"), texts(map.keyArray()));
        assertEquals(Arrays.asList("v", "2", null), texts(map.valueArray()));
        InternalRow s = values.getStruct(2, 2);
        assertEquals("1", text(s, 0));
        assertEquals("d", text(s.getStruct(1, 1), 0));
        assertEquals(List.of("z", "a"), texts(row.getArray(6)));  // top-level only: not s's "extra"

        assertEquals("12", text(one("{\"t\":12}").getStruct(4, 4), 0));
        assertEquals("true", text(one("{\"t\":true}").getStruct(4, 4), 0));
        assertEquals("caf\u00e9", text(one(new String("{\"t\":\"caf\u00e9\"}".getBytes(UTF_8), ISO_8859_1))
            .getStruct(4, 4), 0));
    }

    @Test
    void nullAndMissingFieldsAreNullAndTheLineIsStillParsed() throws IOException {
        InternalRow row = one("{\"t\":null,\"m\":null}");
        assertTrue(row.getBoolean(5));
        InternalRow values = row.getStruct(4, 4);
        for (int i = 0; i < 4; i++) {
            assertTrue(values.isNullAt(i), "field " + i);
        }
        assertEquals(List.of(), texts(row.getArray(6)));
    }

    @Test
    void aTopLevelCorruptRecordFieldStaysNullAndItsKeyIsAnOtherKey() throws IOException {
        InternalRow row = one("{\"_corrupt_record\":\"x\",\"t\":\"y\"}");
        assertTrue(row.getBoolean(5));
        assertTrue(row.getStruct(4, 4).isNullAt(3));
        assertEquals("y", text(row.getStruct(4, 4), 0));
        assertEquals(List.of("_corrupt_record"), texts(row.getArray(6)));
    }

    @Test
    void spacesAroundTheObjectAndACarriageReturnAreAllowed() throws IOException {
        List<InternalRow> rows = read(" \t{ \"t\" : \"a\" } \t\r\n{\"t\":\"b\"}\r\n", fields, null, 0, null);
        assertEquals(2, rows.size());
        for (int i = 0; i < 2; i++) {
            assertTrue(rows.get(i).getBoolean(5));
            assertEquals(i == 0 ? "a" : "b", text(rows.get(i).getStruct(4, 4), 0));
        }
    }

    @Test
    void whatFromJsonWouldNotTakeExactlySoIsMarkedNotParsed() throws IOException {
        List<String> lines = List.of(
            "",                                      // not an object
            "[{\"t\":\"a\"}]",
            "\"t\"",
            "{\"t\":\"a\"} {\"t\":\"b\"}",            // anything after the object
            "{\"t\":\"a\"},",
            "{\"t\":\"a\"",                          // not strict JSON
            "{'t':'a'}",
            "{t:\"a\"}",
            "{\"t\":\"a\",}",
            "{\"t\":01}",
            "{\"t\":NaN}",
            "{\"t\":\"a\"} // note",
            "{\"t\":\"\u00ff\"}",                    // not UTF-8
            "{\"t\":\"a\",\"t\":\"b\"}",              // a field given twice
            "{\"s\":{\"x\":\"1\",\"x\":\"2\"}}",
            "{\"m\":\"a\"}",                          // a map field that is not an object
            "{\"m\":[1]}",
            "{\"m\":{\"k\":\"1\",\"k\":\"2\"}}",      // a map's key given twice
            "{\"s\":\"a\"}");                         // a struct field that is not an object
        StringBuilder text = new StringBuilder();
        for (String line : lines) {
            text.append(line).append('\n');
            text.append("{\"t\":\"ok\",\"s\":{\"x\":\"1\"}}\n");  // each followed by a good one
        }
        List<InternalRow> rows = read(text.toString(), fields, null, 0, null);
        assertEquals(2 * lines.size(), rows.size());
        for (int i = 0; i < lines.size(); i++) {
            InternalRow bad = rows.get(2 * i);
            assertFalse(bad.getBoolean(5), lines.get(i));
            assertTrue(bad.isNullAt(4), lines.get(i));
            assertTrue(bad.isNullAt(6), lines.get(i));
            InternalRow good = rows.get(2 * i + 1);
            assertTrue(good.getBoolean(5), "the line after " + lines.get(i));
            assertEquals("ok", text(good.getStruct(4, 4), 0));
        }
    }

    @Test
    void aWrappedRecordHasItsBodyParsedAloneWhereverItsHeadIs() throws IOException {
        StructType wrapped = new StructType().add("x", DataTypes.StringType)
            .add("payload", new StructType().add("a", DataTypes.StringType));
        String headFirst = "{\"schema\":{\"v\":1},\"payload\":{\"a\":\"1\",\"b\":2}}";
        String bodyFirst = "{\"payload\":{\"a\":\"2\"}, \"schema\":{\"v\":1}}";
        String otherHead = "{\"schema\":{\"v\":2},\"payload\":{\"a\":\"3\"}}";
        String whole = "{\"x\":\"4\",\"a\":\"5\"}";
        String more = "{\"schema\":{\"v\":1},\"payload\":{\"a\":\"6\"},\"x\":\"7\"}";  // not only head and body
        List<InternalRow> rows = read(String.join("\n", headFirst, bodyFirst, otherHead, headFirst, whole, more),
            wrapped, "schema,payload", 0, null);
        assertEquals(6, rows.size());
        long v1 = 0x9d243d6e1e08f168L;  // FNV-1a 64 of {"v":1}
        long v2 = 0x9d193d6e1dfee9e3L;  // of {"v":2}
        int[] heads = {headFirst.indexOf("{\"a\""), 11, otherHead.indexOf("{\"a\""), headFirst.indexOf("{\"a\"")};
        long[] ids = {v1, v1, v2, v1};
        String[] bodies = {"1", "2", "3", "1"};
        for (int i = 0; i < 4; i++) {
            InternalRow row = rows.get(i);
            assertEquals(9, row.numFields());
            assertTrue(row.getBoolean(5), "line " + i);
            assertTrue(row.getStruct(4, 2).isNullAt(0));
            assertEquals(bodies[i], text(row.getStruct(4, 2).getStruct(1, 1), 0));
            assertEquals(heads[i], row.getInt(7), "line " + i);
            assertEquals(ids[i], row.getLong(8), "line " + i);
        }
        InternalRow parsedWhole = rows.get(4);
        assertTrue(parsedWhole.getBoolean(5));
        assertEquals("4", text(parsedWhole.getStruct(4, 2), 0));
        assertEquals(List.of("a"), texts(parsedWhole.getArray(6)));
        assertTrue(parsedWhole.isNullAt(7));
        assertTrue(parsedWhole.isNullAt(8));
        InternalRow notParsed = rows.get(5);
        assertFalse(notParsed.getBoolean(5));
        assertTrue(notParsed.isNullAt(7));
        assertTrue(notParsed.isNullAt(8));
    }

    @Test
    void theTableHasTheColumnsOfItsMode() {
        String json = "{\"type\":\"struct\",\"fields\":["
            + "{\"name\":\"t\",\"type\":\"string\",\"nullable\":true,\"metadata\":{}},"
            + "{\"name\":\"m\",\"type\":{\"type\":\"map\",\"keyType\":\"string\",\"valueType\":\"string\","
            + "\"valueContainsNull\":true},\"nullable\":true,\"metadata\":{}},"
            + "{\"name\":\"s\",\"type\":{\"type\":\"struct\",\"fields\":["
            + "{\"name\":\"x\",\"type\":\"string\",\"nullable\":true,\"metadata\":{}},"
            + "{\"name\":\"y\",\"type\":{\"type\":\"struct\",\"fields\":["
            + "{\"name\":\"deep\",\"type\":\"string\",\"nullable\":true,\"metadata\":{}}]},"
            + "\"nullable\":true,\"metadata\":{}}]},\"nullable\":true,\"metadata\":{}},"
            + "{\"name\":\"_corrupt_record\",\"type\":\"string\",\"nullable\":true,\"metadata\":{}}]}";
        assertEquals(List.of("split", "lines"), names(JsonLines.schema(Map.of("mode", "count"))));
        assertEquals(List.of("split", "lines", "heads"),
            names(JsonLines.schema(Map.of("mode", "count", "head", "schema,payload"))));
        assertEquals(List.of("source_file", "source_line", "landing_date", "payload"),
            names(JsonLines.schema(Map.of("mode", "lines"))));
        assertEquals(List.of("source_file", "source_line", "landing_date", "payload", "_json", "_json_ok",
            "_json_keys"), names(JsonLines.schema(Map.of("mode", "lines", "json", json))));
        StructType headed = JsonLines.schema(Map.of("mode", "lines", "json", json, "head", "schema,payload"));
        assertEquals(List.of("source_file", "source_line", "landing_date", "payload", "_json", "_json_ok",
            "_json_keys", "_json_head", "_json_schema"), names(headed));
        assertEquals(fields, headed.apply("_json").dataType());
    }

    @Test
    void onlyTextMapsOfTextAndStructsOfThoseAreParsed() {
        Map<StructType, String> refusals = Map.of(
            new StructType().add("n", DataTypes.IntegerType), "n int",
            new StructType().add("m", DataTypes.createMapType(DataTypes.StringType, DataTypes.IntegerType)),
            "m map<string,int>",
            new StructType().add("m", DataTypes.createMapType(DataTypes.IntegerType, DataTypes.StringType)),
            "m map<int,string>",
            new StructType().add("a", DataTypes.createArrayType(DataTypes.StringType)), "a array<string>",
            new StructType().add("t", DataTypes.StringType)
                .add("s", new StructType().add("n", DataTypes.LongType)), "n bigint");
        for (Map.Entry<StructType, String> refusal : refusals.entrySet()) {
            IllegalArgumentException refused = assertThrows(IllegalArgumentException.class,
                () -> new JsonLines.Shape(refusal.getKey(), true), refusal.getValue());
            assertEquals("JsonLines parses string, map<string,string> and struct fields of those, not "
                + refusal.getValue(), refused.getMessage());
        }
        JsonLines.Shape shape = new JsonLines.Shape(fields, true);
        assertEquals(Map.of("t", 0, "m", 1, "s", 2), shape.index);  // a top-level _corrupt_record is not parsed
        assertEquals(Map.of("x", 0, "y", 1, "_corrupt_record", 2), new JsonLines.Shape(new StructType()
            .add("x", DataTypes.StringType).add("y", new StructType())
            .add("_corrupt_record", DataTypes.StringType), false).index);
    }

    private static List<String> names(StructType type) {
        return Arrays.asList(type.fieldNames());
    }
}
