package lakehouse;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.lang.reflect.Modifier;
import java.nio.charset.StandardCharsets;
import java.time.ZoneId;
import java.util.Collections;
import java.util.HashMap;
import java.util.HashSet;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import java.util.zip.ZipEntry;
import java.util.zip.ZipFile;

import org.apache.spark.sql.catalyst.FunctionIdentifier;
import org.apache.spark.sql.catalyst.analysis.FunctionRegistry$;
import org.apache.spark.sql.catalyst.analysis.SimpleFunctionRegistry;
import org.apache.spark.sql.catalyst.analysis.SimpleTableFunctionRegistry;
import org.apache.spark.sql.catalyst.analysis.TableFunctionRegistry$;
import org.apache.spark.sql.catalyst.expressions.ExpressionInfo;

import scala.Option;

/**
 * What a statement on the SQL endpoint may be made of, by name: the plan nodes, commands, functions, analyser
 * expressions and session settings of read-policy.tsv (beside this class, in the jar). What the list does not
 * allow is refused, a kind it has never heard of included, so that a Spark upgrade cannot add a way in.
 *
 * <p>{@code java -cp <spark jars>:<this jar> lakehouse.ReadPolicy universe JAR...} lists every concrete plan
 * node and command class in those jars and every built-in function: what a test holds the list against;
 * {@code ... examples} every built-in function's documented examples and {@code ... settings} every setting
 * Spark defines: what the endpoint's fuzzer makes statements of.
 */
public final class ReadPolicy {
    static final String RESOURCE = "lakehouse/read-policy.tsv";

    private static volatile ReadPolicy loaded;

    final Map<String, String> refusedWhy = new HashMap<>();  // "kind\tname" -> why, for refusals the list names
    final Set<String> plans = new HashSet<>();
    final Set<String> commands = new HashSet<>();
    final Set<String> functions = new HashSet<>();
    final Set<String> expressionClasses = new HashSet<>();  // simple names of allowed expression classes
    final Map<String, Set<String>> expressionFunction = new HashMap<>();  // class -> refused functions it is
    final Map<String, String> settings = new HashMap<>();  // lower-cased key -> value rule
    final Map<String, String> settingNames = new HashMap<>();  // lower-cased key -> key as Spark spells it

    static ReadPolicy get() {
        ReadPolicy policy = loaded;
        if (policy == null) {
            synchronized (ReadPolicy.class) {
                if (loaded == null) {
                    loaded = load();
                }
                policy = loaded;
            }
        }
        return policy;
    }

    private static ReadPolicy load() {
        ReadPolicy policy = new ReadPolicy();
        try (InputStream in = ReadPolicy.class.getClassLoader().getResourceAsStream(RESOURCE)) {
            if (in == null) {
                throw new IllegalStateException("the SQL endpoint's list " + RESOURCE + " is not in its jar");
            }
            BufferedReader lines = new BufferedReader(new InputStreamReader(in, StandardCharsets.UTF_8));
            for (String line = lines.readLine(); line != null; line = lines.readLine()) {
                if (line.isEmpty() || line.startsWith("#")) {
                    continue;
                }
                String[] part = line.split("\t", -1);
                policy.add(part[0], part[1], part[2].equals("allow"), part.length > 3 ? part[3] : "");
            }
        } catch (IOException e) {
            throw new IllegalStateException("the SQL endpoint's list " + RESOURCE + " cannot be read", e);
        }
        policy.resolveFunctionClasses();
        return policy;
    }

    private void add(String kind, String name, boolean allow, String rule) {
        if (!allow) {
            refusedWhy.put(kind + "\t" + name, rule);
            return;
        }
        switch (kind) {
            case "plan": plans.add(name); break;
            case "command": commands.add(name); break;
            case "function": functions.add(name); break;
            case "expression": expressionClasses.add(name); break;
            case "setting":
                settings.put(name.toLowerCase(Locale.ROOT), rule);
                settingNames.put(name.toLowerCase(Locale.ROOT), name);
                break;
            default: throw new IllegalStateException("unknown kind in " + RESOURCE + ": " + kind);
        }
    }

    /** The classes of the allowed functions, as Spark's registries name them: what expressions may be. */
    private void resolveFunctionClasses() {
        for (Registry registry : registries()) {
            for (String name : registry.names()) {
                String simple = registry.className(name);
                if (simple == null) {
                    continue;
                }
                if (functions.contains(name)) {
                    expressionClasses.add(simple);
                } else {
                    expressionFunction.computeIfAbsent(simple, key -> new TreeSet<>()).add(name);
                }
            }
        }
        for (String refusedClass : new HashSet<>(expressionFunction.keySet())) {
            if (expressionClasses.contains(refusedClass)) {
                expressionFunction.remove(refusedClass);  // a class an allowed function shares
            }
        }
    }

    String why(String kind, String name) {
        String why = refusedWhy.get(kind + "\t" + name);
        return why == null || why.isEmpty() ? "not on the endpoint's list of what reading is made of" : why;
    }

    /** A refusal's reason when this setting may not take this value from a client, else null. */
    String settingRefused(String key, String value) {
        String rule = settings.get(key.toLowerCase(Locale.ROOT));
        if (rule == null) {
            return "setting " + key + " may not be changed on this endpoint (settable: "
                + new TreeSet<>(settingNames.values()) + ")";
        }
        String[] words = rule.split(" ");
        String v = value == null ? "" : value.trim();
        boolean ok;
        switch (words[0]) {
            case "bool":
                ok = v.equalsIgnoreCase("true") || v.equalsIgnoreCase("false");
                break;
            case "int":
                long low = Long.parseLong(words[1]);
                long high = Long.parseLong(words[2]);
                try {
                    long n = Long.parseLong(v);
                    ok = n >= low && n <= high;
                } catch (NumberFormatException e) {
                    ok = false;
                }
                break;
            case "one":
                ok = false;
                for (int i = 1; i < words.length; i++) {
                    ok |= words[i].equalsIgnoreCase(v);
                }
                break;
            case "zone":
                try {
                    ZoneId.of(v);
                    ok = v.length() <= 64;
                } catch (RuntimeException e) {
                    ok = false;
                }
                break;
            default:
                ok = false;
        }
        return ok ? null : "setting " + key + " takes " + rule.replace("int ", "a whole number from ")
            .replace("one ", "one of ") + " on this endpoint, not " + abbreviate(v);
    }

    static String abbreviate(String value) {
        return value.length() > 40 ? value.substring(0, 40) + "..." : value;
    }

    /** Spark's function registries (built-in scalar/aggregate functions and table functions). */
    private static Registry[] registries() {
        return new Registry[] {new Registry(FunctionRegistry$.MODULE$.builtin()),
            new Registry(TableFunctionRegistry$.MODULE$.builtin())};
    }

    /** One of the two registries; they share no interface that lists and looks up. */
    static final class Registry {
        private final Object registry;

        Registry(Object registry) {
            this.registry = registry;
        }

        Set<String> names() {
            Set<String> names = new TreeSet<>();
            scala.collection.Iterator<FunctionIdentifier> ids = registry instanceof SimpleFunctionRegistry
                ? ((SimpleFunctionRegistry) registry).listFunction().iterator()
                : ((SimpleTableFunctionRegistry) registry).listFunction().iterator();
            while (ids.hasNext()) {
                names.add(ids.next().funcName());
            }
            return names;
        }

        private ExpressionInfo info(String name) {
            FunctionIdentifier id = FunctionIdentifier.apply(name);
            Option<ExpressionInfo> info = registry instanceof SimpleFunctionRegistry
                ? ((SimpleFunctionRegistry) registry).lookupFunction(id)
                : ((SimpleTableFunctionRegistry) registry).lookupFunction(id);
            return info.isEmpty() ? null : info.get();
        }

        String examples(String name) {
            ExpressionInfo info = info(name);
            return info == null || info.getExamples() == null ? "" : info.getExamples();
        }

        /** The simple name of the class the function is, or null. */
        String className(String name) {
            ExpressionInfo info = info(name);
            if (info == null || info.getClassName() == null) {
                return null;
            }
            return info.getClassName().substring(info.getClassName().lastIndexOf('.') + 1);
        }
    }

    /** `universe JAR...`: every plan node, command and built-in function a statement could be made of. */
    public static void main(String[] args) throws Exception {
        if (args.length == 1 && args[0].equals("examples")) {
            for (Registry registry : registries()) {
                for (String name : registry.names()) {
                    System.out.println(name + "\t" + registry.examples(name).replace("\\", "\\\\")
                        .replace("\n", "\\n").replace("\t", "\\t"));
                }
            }
            return;
        }
        if (args.length == 1 && args[0].equals("settings")) {
            scala.collection.Iterator<scala.Tuple4<String, String, String, String>> confs =
                new org.apache.spark.sql.internal.SQLConf().getAllDefinedConfs().iterator();
            while (confs.hasNext()) {
                System.out.println(confs.next()._1());
            }
            return;
        }
        if (args.length == 0 || !args[0].equals("universe")) {
            System.err.println("usage: lakehouse.ReadPolicy universe JAR... | examples | settings");
            System.exit(2);
        }
        Class<?> plan = Class.forName("org.apache.spark.sql.catalyst.plans.logical.LogicalPlan");
        Class<?> command = Class.forName("org.apache.spark.sql.catalyst.plans.logical.Command");
        Set<String> out = new TreeSet<>();
        for (int i = 1; i < args.length; i++) {
            try (ZipFile jar = new ZipFile(args[i])) {
                for (ZipEntry entry : Collections.list(jar.entries())) {
                    String name = entry.getName();
                    if (!name.endsWith(".class") || name.contains("$")) {
                        continue;
                    }
                    Class<?> found;
                    try {
                        found = Class.forName(name.substring(0, name.length() - 6).replace('/', '.'), false,
                            ReadPolicy.class.getClassLoader());
                    } catch (Throwable e) {  // a class whose own dependencies are not on the class path
                        continue;
                    }
                    if (found.isInterface() || Modifier.isAbstract(found.getModifiers())
                            || !plan.isAssignableFrom(found)) {
                        continue;
                    }
                    out.add((command.isAssignableFrom(found) ? "command\t" : "plan\t") + found.getSimpleName());
                }
            }
        }
        for (Registry registry : registries()) {
            for (String name : registry.names()) {
                out.add("function\t" + name);
            }
        }
        out.forEach(System.out::println);
    }
}
