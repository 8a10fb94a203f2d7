package lakehouse;

import java.io.ByteArrayOutputStream;
import java.io.Closeable;
import java.io.IOException;
import java.io.InputStream;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;

import com.fasterxml.jackson.core.JsonEncoding;
import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonGenerator;
import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonToken;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataInputStream;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.io.compress.CompressionCodec;
import org.apache.hadoop.io.compress.CompressionCodecFactory;
import org.apache.spark.api.java.JavaSparkContext;
import org.apache.spark.broadcast.Broadcast;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.catalyst.util.ArrayBasedMapData;
import org.apache.spark.sql.catalyst.util.GenericArrayData;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.MapType;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;
import org.apache.spark.unsafe.types.UTF8String;
import org.apache.spark.util.SerializableConfiguration;

/**
 * Landing files read line by line from their bytes, each line with its file, its 1-based number and its raw text;
 * and, when asked, each line parsed once as a JSON object into the given top-level fields (as Spark's
 * {@code from_json} types them: text, or a map of texts) with the top-level keys it has beyond them.
 *
 * <p>Options: {@code splits}, a JSON array of partitions, each an array of splits
 * {@code [path, start, end, lines before, landing day]} ({@code end} -1: to the end of the file, which is how a
 * compressed file is read; the landing day in days since 1970-01-01, or null); {@code mode}, {@code count} (one
 * row per split: its index in the order given, how many lines start in it and, with {@code head}, the heads of its
 * wrapped records, each with how many begin with it) or {@code lines}; {@code json},
 * the schema of the fields to parse (string, map&lt;string,string&gt; and struct fields of those, as deep as
 * wanted; a top-level {@code _corrupt_record} field stays null); {@code head}, two field names
 * {@code <head>,<body>} (the body a struct field): a wrapped record {@code {"<head>": <object>, "<body>": <object>}}
 * has its body parsed alone, its head's object passed over (not even read while the split's records begin with
 * the same bytes as one of the last few), {@code _json_head} says where the body began (null for a line parsed whole)
 * and {@code _json_schema} identifies its head's object ({@code Heads.id}); a record written body first
 * ({@code {"<body>": <object>, "<head>": <object>}}) is read the same way, its tail passed over.
 *
 * <p>A line belongs to the split its first byte is in; a split that does not start the file begins after the
 * first newline at or after its start - 1. A file's UTF-8 byte order mark and a line's one final carriage return
 * are not part of the line, and a final newline ends the last line without starting another (as Hadoop's line
 * reader). A line this parser does not take exactly as {@code from_json} would (not an object, not strict JSON,
 * a field given twice, a map field that is not an object, anything after the object) is marked not parsed
 * ({@code _json_ok} false), for the caller to parse the slow, exact way.
 */
public final class JsonLines implements TableProvider {

    static final ObjectMapper MAPPER = new ObjectMapper();

    @Override
    public StructType inferSchema(CaseInsensitiveStringMap options) {
        return schema(options);
    }

    @Override
    public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
        return new LinesTable(schema);
    }

    static StructType schema(Map<String, String> options) {
        if ("count".equals(options.get("mode"))) {
            StructType counted = new StructType().add("split", DataTypes.IntegerType, false)
                    .add("lines", DataTypes.LongType, false);
            return options.get("head") == null ? counted : counted.add("heads",
                    DataTypes.createMapType(DataTypes.StringType, DataTypes.LongType, false), false);
        }
        StructType lines = new StructType()
                .add("source_file", DataTypes.StringType, false)
                .add("source_line", DataTypes.IntegerType, false)
                .add("landing_date", DataTypes.DateType, true)
                .add("payload", DataTypes.StringType, false);
        String json = options.get("json");
        if (json == null) {
            return lines;
        }
        StructType fields = (StructType) DataType.fromJson(json);
        new Shape(fields, true); // (the field types it takes)
        StructType parsed = lines.add("_json", fields, true).add("_json_ok", DataTypes.BooleanType, false)
                .add("_json_keys", DataTypes.createArrayType(DataTypes.StringType, false), true);
        return options.get("head") == null ? parsed : parsed.add("_json_head", DataTypes.IntegerType, true)
                .add("_json_schema", DataTypes.LongType, true);
    }

    static final class LinesTable implements Table, SupportsRead {
        private final StructType schema;

        LinesTable(StructType schema) {
            this.schema = schema;
        }

        @Override
        public String name() {
            return "json_lines";
        }

        @Override
        public StructType schema() {
            return schema;
        }

        @Override
        public Set<TableCapability> capabilities() {
            return new HashSet<>(Arrays.asList(TableCapability.BATCH_READ));
        }

        @Override
        public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
            return () -> new LinesScan(schema, options);
        }
    }

    /** One split of a file: bytes [start, end) (end -1: to the end), the file's lines before it, its landing day. */
    static final class Split implements java.io.Serializable {
        final int index;
        final String path;
        final long start;
        final long end;
        final long before;
        final Integer day;

        Split(int index, JsonNode node) {
            this.index = index;
            this.path = node.get(0).asText();
            this.start = node.get(1).asLong();
            this.end = node.get(2).asLong();
            this.before = node.get(3).asLong();
            this.day = node.get(4).isNull() ? null : node.get(4).asInt();
        }
    }

    static final class Part implements InputPartition {
        final Split[] splits;

        Part(Split[] splits) {
            this.splits = splits;
        }
    }

    static final class LinesScan implements Scan, Batch {
        private final StructType schema;
        private final Map<String, String> options;

        LinesScan(StructType schema, Map<String, String> options) {
            this.schema = schema;
            this.options = new HashMap<>(options);
        }

        @Override
        public StructType readSchema() {
            return schema;
        }

        @Override
        public Batch toBatch() {
            return this;
        }

        @Override
        public InputPartition[] planInputPartitions() {
            List<InputPartition> parts = new ArrayList<>();
            try {
                int index = 0;
                for (JsonNode part : MAPPER.readTree(options.get("splits"))) {
                    List<Split> splits = new ArrayList<>();
                    for (JsonNode split : part) {
                        splits.add(new Split(index++, split));
                    }
                    parts.add(new Part(splits.toArray(new Split[0])));
                }
            } catch (IOException e) {
                throw new IllegalArgumentException("JsonLines: the splits option is not a JSON array", e);
            }
            return parts.toArray(new InputPartition[0]);
        }

        @Override
        public PartitionReaderFactory createReaderFactory() {
            SparkSession spark = SparkSession.active();
            Configuration conf = spark.sessionState().newHadoopConf();
            Broadcast<SerializableConfiguration> shared = JavaSparkContext.fromSparkContext(spark.sparkContext())
                    .broadcast(new SerializableConfiguration(conf));
            boolean count = "count".equals(options.get("mode"));
            return new Factory(shared, count, options.get("json"), options.get("head"));
        }
    }

    static final class Factory implements PartitionReaderFactory {
        private final Broadcast<SerializableConfiguration> conf;
        private final boolean count;
        private final String json;
        private final String head;

        Factory(Broadcast<SerializableConfiguration> conf, boolean count, String json, String head) {
            this.conf = conf;
            this.count = count;
            this.json = json;
            this.head = head;
        }

        @Override
        public PartitionReader<InternalRow> createReader(InputPartition partition) {
            Split[] splits = ((Part) partition).splits;
            Configuration hadoop = conf.value().value();
            return count ? new Counter(hadoop, splits, head == null ? null : new Heads(head))
                    : new Reader(hadoop, splits, json == null ? null : (StructType) DataType.fromJson(json), head);
        }
    }

    /** The lines of one split, as bytes in a reused buffer. */
    static final class LineSource implements Closeable {
        private static final int CHUNK = 1 << 16;
        private final InputStream in;
        private final long end;
        private final byte[] chunk = new byte[CHUNK];
        private int at;
        private int filled;
        private long position; // of chunk[at] in the file (in the uncompressed bytes)
        private boolean eof;
        private boolean first;
        byte[] line = new byte[1024];
        int length;

        LineSource(Configuration conf, Split split) throws IOException {
            Path path = new Path(split.path);
            FileSystem fs = path.getFileSystem(conf);
            CompressionCodec codec = new CompressionCodecFactory(conf).getCodec(path);
            FSDataInputStream raw = fs.open(path);
            this.end = split.end;
            if (codec != null) {
                if (split.start != 0 || split.end != -1) {
                    raw.close();
                    throw new IOException(split.path + ": a compressed file is read whole");
                }
                this.in = codec.createInputStream(raw);
            } else {
                this.in = raw;
                if (split.start > 0) { // from the byte before: through the newline that ends the line before ours
                    raw.seek(split.start - 1);
                    this.position = split.start - 1;
                    skipLine();
                }
            }
            this.first = split.start == 0;
        }

        private boolean fill() throws IOException {
            if (at < filled) {
                return true;
            }
            if (eof) {
                return false;
            }
            int n = in.read(chunk, 0, CHUNK);
            while (n == 0) {
                n = in.read(chunk, 0, CHUNK);
            }
            if (n < 0) {
                eof = true;
                at = filled = 0;
                return false;
            }
            at = 0;
            filled = n;
            return true;
        }

        private void skipLine() throws IOException {
            while (fill()) {
                int i = at;
                while (i < filled && chunk[i] != '\n') {
                    i++;
                }
                position += i - at;
                at = i;
                if (i < filled) {
                    at++;
                    position++;
                    return;
                }
            }
        }

        /** Whether a line starts in this split; when one does, it is read (`copy`) or passed over. */
        boolean next(boolean copy) throws IOException {
            if ((end >= 0 && position >= end) || !fill()) {
                return false;
            }
            length = 0;
            while (true) {
                int i = at;
                while (i < filled && chunk[i] != '\n') {
                    i++;
                }
                if (copy) {
                    append(at, i - at);
                }
                position += i - at;
                at = i;
                if (i < filled) {
                    at++;
                    position++;
                    break;
                }
                if (!fill()) {
                    break;
                }
            }
            if (first) {
                first = false;
                if (copy && length >= 3 && (line[0] & 0xFF) == 0xEF && (line[1] & 0xFF) == 0xBB
                        && (line[2] & 0xFF) == 0xBF) {
                    System.arraycopy(line, 3, line, 0, length - 3);
                    length -= 3;
                }
            }
            if (copy && length > 0 && line[length - 1] == '\r') {
                length--;
            }
            return true;
        }

        private void append(int from, int n) {
            if (length + n > line.length) {
                line = Arrays.copyOf(line, Math.max(line.length * 2, length + n));
            }
            System.arraycopy(chunk, from, line, length, n);
            length += n;
        }

        @Override
        public void close() throws IOException {
            in.close();
        }
    }

    /**
     * How a wrapped record {@code {"<head>": <object>, "<body>": <object>}} begins, through its body's key and
     * colon: its head. The last heads found are kept ({@code RECENT} of them): a line that begins with the
     * same bytes as one of them is not read again. A record written body first
     * ({@code {"<body>": <object>, "<head>": <object>}}, as JSON with sorted keys is) has its tail kept the same
     * way, all that follows its body. Each line found is given its head's schema's id ({@code id}: a 64-bit
     * FNV-1a hash of the head object's bytes as written) and the slot its head or tail is kept in ({@code slot}:
     * heads from 0, tails from {@code RECENT}).
     */
    static final class Heads {
        final String headName;
        final String bodyName;
        private final byte[] headKey; // the names as JSON strings
        private final byte[] bodyKey;
        static final int RECENT = 8;
        private final byte[][] kept = new byte[2 * RECENT][]; // heads, then tails (from just past the body on)
        private final long[] keptIds = new long[2 * RECENT];
        private final int[] next = new int[2]; // the slot each kind fills next, in turn
        boolean bodyFirst; // of the line last found
        long id; // its head object's id
        int slot; // where its head (or tail) is kept
        int schemaFrom = -1; // where its head object is in the line, when it was read anew (else -1)
        int schemaTo;

        Heads(String names) {
            String[] both = names.split(",", 2);
            if (both.length != 2) {
                throw new IllegalArgumentException("JsonLines: the head option is two field names, <head>,<body>");
            }
            this.headName = both[0];
            this.bodyName = both[1];
            this.headKey = ("\"" + both[0] + "\"").getBytes(java.nio.charset.StandardCharsets.UTF_8);
            this.bodyKey = ("\"" + both[1] + "\"").getBytes(java.nio.charset.StandardCharsets.UTF_8);
        }

        /**
         * Where the line's body begins (its opening brace); 0 for a line that is no such record. A line written
         * body first is found by its first key alone: its tail is checked once its body is read ({@code tail}).
         */
        int find(byte[] bytes, int length) {
            bodyFirst = false;
            schemaFrom = -1;
            for (int k = 0; k < RECENT && kept[k] != null; k++) {
                byte[] known = kept[k];
                if (length > known.length && Arrays.equals(bytes, 0, known.length, known, 0, known.length)) {
                    id = keptIds[k];
                    slot = k;
                    return known.length;
                }
            }
            try (JsonParser p = Reader.FACTORY.createParser(bytes, 0, length)) {
                if (p.nextToken() != JsonToken.START_OBJECT || p.nextToken() != JsonToken.FIELD_NAME) {
                    return 0;
                }
                String first = p.getCurrentName();
                if (bodyName.equals(first)) {
                    if (p.nextToken() != JsonToken.START_OBJECT) {
                        return 0;
                    }
                    int at = (int) p.getTokenLocation().getByteOffset();
                    bodyFirst = at > 0 && at < length && bytes[at] == '{';
                    return bodyFirst ? at : 0;
                }
                if (!headName.equals(first) || p.nextToken() != JsonToken.START_OBJECT) {
                    return 0;
                }
                int from = (int) p.getTokenLocation().getByteOffset();
                p.skipChildren();
                int end = (int) p.getCurrentLocation().getByteOffset(); // just past the head's closing brace
                if (from < 1 || bytes[from] != '{' || end <= from || end > length || bytes[end - 1] != '}') {
                    return 0;
                }
                int i = space(bytes, end, length);
                if (i >= length || bytes[i] != ',') {
                    return 0;
                }
                i = key(bytes, space(bytes, i + 1, length), length, bodyKey);
                if (i < 0 || (i = space(bytes, i, length)) >= length || bytes[i] != '{') {
                    return 0;
                }
                keep(0, Arrays.copyOf(bytes, i), id(bytes, from, end));
                schemaFrom = from;
                schemaTo = end;
                return i;
            } catch (IOException | RuntimeException e) {
                return 0;
            }
        }

        /** A line written body first, from just past its body ({@code end}): {@code , "<head>": <object> }} and
         * nothing more (its id into {@code id}); false for anything else. */
        boolean tail(byte[] bytes, int end, int length) {
            schemaFrom = -1;
            for (int k = RECENT; k < 2 * RECENT && kept[k] != null; k++) {
                byte[] known = kept[k];
                if (length - end == known.length && Arrays.equals(bytes, end, length, known, 0, known.length)) {
                    id = keptIds[k];
                    slot = k;
                    return true;
                }
            }
            int i = space(bytes, end, length);
            if (i >= length || bytes[i] != ',') {
                return false;
            }
            int from = key(bytes, space(bytes, i + 1, length), length, headKey);
            from = from < 0 ? -1 : space(bytes, from, length);
            int to = from < 0 ? -1 : objectEnd(bytes, from, length);
            if (to < 0 || (i = space(bytes, to, length)) >= length || bytes[i] != '}' || space(bytes, i + 1, length) != length) {
                return false;
            }
            keep(1, Arrays.copyOfRange(bytes, end, length), id(bytes, from, to));
            schemaFrom = from;
            schemaTo = to;
            return true;
        }

        private void keep(int kind, byte[] bytes, long id) {
            slot = kind * RECENT + next[kind];
            next[kind] = (next[kind] + 1) % RECENT;
            kept[slot] = bytes;
            keptIds[slot] = this.id = id;
        }

        /** Forgets the heads and tails kept (a new split finds its own). */
        void reset() {
            Arrays.fill(kept, null);
            next[0] = next[1] = 0;
        }

        /** Just past a JSON string key and its colon at {@code i} ({@code key} as its exact bytes); -1 if not. */
        private static int key(byte[] bytes, int i, int length, byte[] key) {
            if (length - i < key.length || !Arrays.equals(bytes, i, i + key.length, key, 0, key.length)) {
                return -1;
            }
            i = space(bytes, i + key.length, length);
            return i < length && bytes[i] == ':' ? i + 1 : -1;
        }

        /** Just past the object that begins at {@code from}; -1 where none does. */
        static int objectEnd(byte[] bytes, int from, int length) {
            if (from >= length || bytes[from] != '{') {
                return -1;
            }
            try (JsonParser p = Reader.FACTORY.createParser(bytes, from, length - from)) {
                p.nextToken();
                p.skipChildren();
                int end = from + (int) p.getCurrentLocation().getByteOffset(); // offsets count from `from`
                return end > from && end <= length && bytes[end - 1] == '}' ? end : -1;
            } catch (IOException | RuntimeException e) {
                return -1;
            }
        }

        /** A 64-bit FNV-1a hash of the bytes [from, to). */
        static long id(byte[] bytes, int from, int to) {
            long h = 0xcbf29ce484222325L;
            for (int i = from; i < to; i++) {
                h = (h ^ (bytes[i] & 0xFF)) * 0x100000001b3L;
            }
            return h;
        }

        /** The line's head as a head-first record would begin: {@code {"<head>":<object>,"<body>":}}. */
        byte[] headOf(byte[] bytes) {
            if (!bodyFirst) {
                return kept[slot];
            }
            int n = schemaTo - schemaFrom;
            byte[] out = new byte[1 + headKey.length + 1 + n + 1 + bodyKey.length + 1];
            int at = 0;
            out[at++] = '{';
            System.arraycopy(headKey, 0, out, at, headKey.length);
            at += headKey.length;
            out[at++] = ':';
            System.arraycopy(bytes, schemaFrom, out, at, n);
            at += n;
            out[at++] = ',';
            System.arraycopy(bodyKey, 0, out, at, bodyKey.length);
            at += bodyKey.length;
            out[at] = ':';
            return out;
        }

        static int space(byte[] bytes, int i, int length) {
            while (i < length && (bytes[i] == ' ' || bytes[i] == '\t' || bytes[i] == '\r' || bytes[i] == '\n')) {
                i++;
            }
            return i;
        }
    }

    /** Each split's lines counted; with {@code head}, the distinct heads its lines begin with, each with its lines
     * (a record written body first is counted under the head it would begin with, written compact). */
    static final class Counter implements PartitionReader<InternalRow> {
        static final int MAX_HEADS = 64; // per split; the lines of any other head are counted, not listed
        private final Configuration conf;
        private final Split[] splits;
        private final Heads heads;
        private int next;
        private InternalRow row;

        Counter(Configuration conf, Split[] splits, Heads heads) {
            this.conf = conf;
            this.splits = splits;
            this.heads = heads;
        }

        @Override
        public boolean next() throws IOException {
            if (next >= splits.length) {
                return false;
            }
            Split split = splits[next++];
            long lines = 0;
            Map<java.nio.ByteBuffer, long[]> found = new java.util.LinkedHashMap<>();
            long[][] tallies = new long[2 * Heads.RECENT][]; // the kept heads' and tails', by slot
            try (LineSource source = new LineSource(conf, split)) {
                while (source.next(heads != null)) {
                    lines++;
                    byte[] line = source.line;
                    int at = heads == null ? 0 : heads.find(line, source.length);
                    if (at == 0) {
                        continue;
                    }
                    if (heads.bodyFirst) {
                        int end = Heads.objectEnd(line, at, source.length);
                        if (end < 0 || !heads.tail(line, end, source.length)) {
                            continue;
                        }
                    }
                    if (heads.schemaFrom >= 0) { // read anew: a head met before in this split, or a new one
                        java.nio.ByteBuffer head = java.nio.ByteBuffer.wrap(heads.headOf(line));
                        long[] tally = found.get(head);
                        if (tally == null && found.size() < MAX_HEADS) {
                            tally = new long[1];
                            found.put(head, tally);
                        }
                        tallies[heads.slot] = tally;
                    }
                    if (tallies[heads.slot] != null) {
                        tallies[heads.slot][0]++;
                    }
                }
            }
            if (heads == null) {
                row = new GenericInternalRow(new Object[] {split.index, lines});
                return true;
            }
            heads.reset();
            Object[] keys = new Object[found.size()];
            Object[] counts = new Object[found.size()];
            int i = 0;
            for (Map.Entry<java.nio.ByteBuffer, long[]> e : found.entrySet()) {
                keys[i] = UTF8String.fromBytes(e.getKey().array());
                counts[i++] = e.getValue()[0];
            }
            row = new GenericInternalRow(new Object[] {split.index, lines,
                    new ArrayBasedMapData(new GenericArrayData(keys), new GenericArrayData(counts))});
            return true;
        }

        @Override
        public InternalRow get() {
            return row;
        }

        @Override
        public void close() {
        }
    }

    /** The fields of an object to parse: each as text, a map of texts, or an object of its own (a nested Shape). */
    static final class Shape {
        static final byte TEXT = 0;
        static final byte MAP = 1;
        static final byte OBJECT = 2;
        final int size;
        final Map<String, Integer> index = new HashMap<>();
        final byte[] kind;
        final Shape[] inner;
        final boolean[] seen;

        Shape(StructType type, boolean top) {
            StructField[] fields = type.fields();
            size = fields.length;
            kind = new byte[size];
            inner = new Shape[size];
            seen = new boolean[size];
            for (int i = 0; i < size; i++) {
                StructField f = fields[i];
                DataType t = f.dataType();
                if (top && f.name().equals("_corrupt_record")) {
                    continue; // stays null: a line parsed here is not corrupt
                }
                index.put(f.name(), i);
                if (t.equals(DataTypes.StringType)) {
                    kind[i] = TEXT;
                } else if (t instanceof MapType && ((MapType) t).keyType().equals(DataTypes.StringType)
                        && ((MapType) t).valueType().equals(DataTypes.StringType)) {
                    kind[i] = MAP;
                } else if (t instanceof StructType) {
                    kind[i] = OBJECT;
                    inner[i] = new Shape((StructType) t, false);
                } else {
                    throw new IllegalArgumentException("JsonLines parses string, map<string,string> and struct fields "
                            + "of those, not " + f.name() + " " + t.simpleString());
                }
            }
        }
    }

    static final class Reader implements PartitionReader<InternalRow> {
        static final JsonFactory FACTORY = new JsonFactory();
        private final Configuration conf;
        private final Split[] splits;
        private final Shape shape;
        private final List<UTF8String> keys = new ArrayList<>();
        private final ByteArrayOutputStream text = new ByteArrayOutputStream();
        private final Heads heads; // a wrapped record's head, passed over (see the head option), or null
        private final int bodyAt; // the index of the field that follows it, the one parsed
        private int next;
        private LineSource source;
        private Split split;
        private UTF8String file;
        private long number;
        private InternalRow row;

        Reader(Configuration conf, Split[] splits, StructType fields, String head) {
            this.conf = conf;
            this.splits = splits;
            this.shape = fields == null ? null : new Shape(fields, true);
            this.heads = head == null || fields == null ? null : new Heads(head);
            Integer body = heads == null ? null : shape.index.get(heads.bodyName);
            if (heads != null && (body == null || shape.kind[body] != Shape.OBJECT)) {
                throw new IllegalArgumentException("JsonLines: the head's second field must be a struct field");
            }
            this.bodyAt = body == null ? -1 : body;
        }

        @Override
        public boolean next() throws IOException {
            while (source == null || !source.next(true)) {
                if (source != null) {
                    source.close();
                    source = null;
                }
                if (next >= splits.length) {
                    return false;
                }
                split = splits[next++];
                source = new LineSource(conf, split);
                file = UTF8String.fromString(split.path);
                number = split.before;
                if (heads != null) {
                    heads.reset();
                }
            }
            number++;
            byte[] bytes = source.line;
            int length = source.length;
            UTF8String payload = UTF8String.fromBytes(Arrays.copyOf(bytes, length));
            if (shape == null) {
                row = new GenericInternalRow(new Object[] {file, (int) number, split.day, payload});
                return true;
            }
            Object[] values = new Object[shape.size];
            keys.clear();
            int head = heads == null ? 0 : heads.find(bytes, length);
            boolean ok = head > 0 ? body(bytes, head, length, values) : parse(bytes, length, values);
            Object[] out = new Object[heads == null ? 7 : 9];
            out[0] = file;
            out[1] = (int) number;
            out[2] = split.day;
            out[3] = payload;
            out[4] = ok ? new GenericInternalRow(values) : null;
            out[5] = ok;
            out[6] = ok ? new GenericArrayData(keys.toArray()) : null;
            if (heads != null) {
                out[7] = ok && head > 0 ? head : null;
                out[8] = ok && head > 0 ? heads.id : null;
            }
            row = new GenericInternalRow(out);
            return true;
        }

        /** A wrapped record from its body on: the body's object, then the record's closing brace alone (or, written
         * body first, its head's object and then the brace: {@code Heads.tail}). */
        private boolean body(byte[] bytes, int from, int length, Object[] values) {
            try (JsonParser p = FACTORY.createParser(bytes, from, length - from)) {
                if (p.nextToken() != JsonToken.START_OBJECT) {
                    return false;
                }
                values[bodyAt] = object(p, shape.inner[bodyAt], null);
                if (values[bodyAt] == null) {
                    return false;
                }
                int end = from + (int) p.getCurrentLocation().getByteOffset(); // just past the body's closing brace
                if (end < from + 1 || end > length || bytes[end - 1] != '}') {
                    return false;
                }
                if (heads.bodyFirst) {
                    return heads.tail(bytes, end, length);
                }
                int i = Heads.space(bytes, end, length);
                return i < length && bytes[i] == '}' && Heads.space(bytes, i + 1, length) == length;
            } catch (IOException | RuntimeException e) {
                return false;
            }
        }

        /** The line as `from_json` would read it into the fields, and its other top-level keys; false when unsure. */
        private boolean parse(byte[] bytes, int length, Object[] values) {
            int i = 0;
            while (i < length && (bytes[i] == ' ' || bytes[i] == '\t')) {
                i++;
            }
            if (i == length || bytes[i] != '{') {
                return false;
            }
            try (JsonParser p = FACTORY.createParser(bytes, 0, length)) {
                p.nextToken();
                return fill(p, shape, values, keys) && p.nextToken() == null;
            } catch (IOException | RuntimeException e) {
                return false;
            }
        }

        /** An object's members into `values` by `shape` (the parser just past its START_OBJECT), through its
         * END_OBJECT; the keys the shape lacks into `others` (when not null); false when unsure. */
        private boolean fill(JsonParser p, Shape shape, Object[] values, List<UTF8String> others) throws IOException {
            Arrays.fill(shape.seen, false);
            JsonToken token;
            while ((token = p.nextToken()) == JsonToken.FIELD_NAME) {
                String name = p.getCurrentName();
                JsonToken value = p.nextToken();
                Integer at = shape.index.get(name);
                if (at == null) {
                    if (others != null) {
                        others.add(UTF8String.fromString(name));
                    }
                    p.skipChildren();
                    continue;
                }
                if (shape.seen[at]) {
                    return false;
                }
                shape.seen[at] = true;
                if (shape.kind[at] == Shape.TEXT) {
                    values[at] = text(p, value);
                } else if (value == JsonToken.VALUE_NULL) {
                    values[at] = null;
                } else if (value != JsonToken.START_OBJECT) {
                    return false;
                } else {
                    values[at] = shape.kind[at] == Shape.MAP ? map(p) : object(p, shape.inner[at], null);
                    if (values[at] == null) {
                        return false;
                    }
                }
            }
            return token == JsonToken.END_OBJECT;
        }

        /** A nested object as a row of its shape (the parser just past its START_OBJECT); null when unsure. */
        private InternalRow object(JsonParser p, Shape inner, List<UTF8String> others) throws IOException {
            Object[] values = new Object[inner.size];
            return fill(p, inner, values, others) ? new GenericInternalRow(values) : null;
        }

        /** A value as Spark's JacksonParser makes text of it: a string's text, any other value as JSON. */
        private UTF8String text(JsonParser p, JsonToken value) throws IOException {
            if (value == JsonToken.VALUE_NULL) {
                return null;
            }
            if (value == JsonToken.VALUE_STRING) {
                return UTF8String.fromString(p.getText());
            }
            text.reset();
            try (JsonGenerator generator = FACTORY.createGenerator(text, JsonEncoding.UTF8)) {
                generator.copyCurrentStructure(p);
            }
            return UTF8String.fromBytes(text.toByteArray());
        }

        /** An object's members as a map of texts; null when a key is given twice. */
        private ArrayBasedMapData map(JsonParser p) throws IOException {
            List<UTF8String> names = new ArrayList<>();
            List<UTF8String> texts = new ArrayList<>();
            Set<String> distinct = new HashSet<>();
            while (p.nextToken() == JsonToken.FIELD_NAME) {
                String name = p.getCurrentName();
                if (!distinct.add(name)) {
                    return null;
                }
                names.add(UTF8String.fromString(name));
                texts.add(text(p, p.nextToken()));
            }
            return new ArrayBasedMapData(new GenericArrayData(names.toArray()), new GenericArrayData(texts.toArray()));
        }

        @Override
        public InternalRow get() {
            return row;
        }

        @Override
        public void close() throws IOException {
            if (source != null) {
                source.close();
            }
        }
    }
}
