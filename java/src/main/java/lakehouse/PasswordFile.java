package lakehouse;

import java.io.IOException;
import java.lang.reflect.Field;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.security.GeneralSecurityException;
import java.security.MessageDigest;
import java.security.SecureRandom;
import java.util.ArrayDeque;
import java.util.Base64;
import java.util.Deque;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import javax.crypto.Mac;
import javax.crypto.SecretKeyFactory;
import javax.crypto.spec.PBEKeySpec;
import javax.crypto.spec.SecretKeySpec;
import javax.security.sasl.AuthenticationException;

import org.apache.hive.service.Service;
import org.apache.hive.service.auth.PasswdAuthenticationProvider;
import org.apache.hive.service.cli.thrift.ThriftBinaryCLIService;
import org.apache.spark.sql.hive.thriftserver.HiveThriftServer2;
import org.apache.thrift.server.TServer;
import org.apache.thrift.transport.TSocket;
import org.apache.thrift.transport.TTransport;
import org.apache.thrift.transport.TTransportException;
import org.apache.thrift.transport.TTransportFactory;

/**
 * The SQL endpoint's sign-in: every connection is decided here, from the users file, read at each sign-in, so
 * a user added or removed counts at once. The file's format is stated once, in serving/users.py (FORMAT), whose
 * add_user writes it (`lakehouse serve --add-user`); parse reads it with the same regular expression (LINE), and a
 * malformed file refuses every sign-in, its line named. With no user in it (or no file), an endpoint that listens
 * on this machine alone takes any client, and one that listens beyond refuses everyone. Where the file is and which
 * of the two applies are the server's, set when it starts (configure), never a system property a client could
 * change. `java lakehouse.PasswordFile FILE USER` (the password on stdin) signs in once, for tests.
 *
 * <p>Failed sign-ins are limited: past MAX_FAILURES of a user's, or MAX_ADDRESS_FAILURES from one address (any
 * user names), within WINDOW_MS, sign-ins of that user or from that address are refused without a look at the
 * password until the window has passed. The address is the connection's, noted when its transport opens
 * (watchAddresses). A successful check is remembered for REMEMBER_MS by a keyed digest of the name, password and
 * the user's line (a password changed in the file is checked anew), so that a dashboard opening connections pays
 * the key derivation once, not at each.
 */
public class PasswordFile implements PasswdAuthenticationProvider {
    static final int MAX_FAILURES = 5;
    static final int MAX_ADDRESS_FAILURES = 20;
    static final long WINDOW_MS = 60_000L;
    static final long REMEMBER_MS = 600_000L;
    // serving/users.py's LINE: NAME:pbkdf2_sha256$ITERATIONS$SALT$HASH, salt and hash in padded base64.
    private static final String BASE64 =
        "(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{4}|[A-Za-z0-9+/]{3}=|[A-Za-z0-9+/]{2}==)";
    static final Pattern LINE = Pattern.compile(
        "([A-Za-z0-9_.@-]+):pbkdf2_sha256\\$([1-9][0-9]{0,8})\\$(" + BASE64 + ")\\$(" + BASE64 + ")");

    private static volatile Path file;
    private static volatile boolean openWithoutUsers;
    private static volatile boolean ready;  // the endpoint's guards are in place: sign-ins may succeed
    private static final byte[] KEY = new SecureRandom().generateSeed(32);
    private static final Map<String, Deque<Long>> FAILURES = new ConcurrentHashMap<>();
    private static final Map<String, Long> REMEMBERED = new ConcurrentHashMap<>();
    private static final ThreadLocal<String> ADDRESS = new ThreadLocal<>();  // of the connection signing in here

    /** Where the users are, and whether anyone may sign in while there are none (an endpoint on loopback). */
    public static void configure(String path, boolean open) {
        file = Paths.get(path);
        openWithoutUsers = open;
    }

    /**
     * From now on sign-ins may succeed: the endpoint's guards (sessions, statements) are in place. Before, while
     * the Thrift server has started and is given them, every sign-in is refused.
     */
    public static void ready() {
        ready = true;
    }

    @Override
    public void Authenticate(String user, String password) throws AuthenticationException {
        Path path = file;
        if (path == null || !ready) {
            throw new AuthenticationException("sign-in refused: the endpoint is starting");
        }
        List<String> lines;
        try {
            lines = Files.exists(path) ? Files.readAllLines(path, StandardCharsets.UTF_8) : List.of();
        } catch (IOException e) {
            throw new AuthenticationException("sign-in refused: the password file cannot be read");
        }
        Map<String, String> users;
        try {
            users = parse(lines);
        } catch (IllegalArgumentException e) {
            throw new AuthenticationException("sign-in refused: the users file is malformed: " + e.getMessage());
        }
        String line = user == null ? null : users.get(user);
        if (users.isEmpty()) {
            if (openWithoutUsers) {
                return;
            }
            throw new AuthenticationException("sign-in refused: the endpoint has no users");
        }
        if (user == null || password == null) {
            throw new AuthenticationException("sign-in refused");
        }
        long now = System.currentTimeMillis();
        String address = ADDRESS.get();
        List<Deque<Long>> counted = new java.util.ArrayList<>();
        counted.add(FAILURES.computeIfAbsent("user " + user, name -> new ArrayDeque<>()));
        if (address != null) {
            counted.add(FAILURES.computeIfAbsent("address " + address, name -> new ArrayDeque<>()));
        }
        for (int i = 0; i < counted.size(); i++) {
            Deque<Long> failures = counted.get(i);
            synchronized (failures) {
                while (!failures.isEmpty() && now - failures.peekFirst() > WINDOW_MS) {
                    failures.pollFirst();
                }
                if (failures.size() >= (i == 0 ? MAX_FAILURES : MAX_ADDRESS_FAILURES)) {
                    throw new AuthenticationException("sign-in refused for " + user + ": too many failed sign-ins "
                        + (i == 0 ? "of this user" : "from " + address) + ", try again in a minute");
                }
            }
        }
        String remembered = line == null ? null : digest(user + "\u0000" + password + "\u0000" + line);
        Long until = remembered == null ? null : REMEMBERED.get(remembered);
        if (until != null && until > now) {
            return;
        }
        if (line != null && matches(password, line)) {
            if (REMEMBERED.size() > 10_000) {
                REMEMBERED.clear();
            }
            REMEMBERED.put(remembered, now + REMEMBER_MS);
            return;
        }
        for (Deque<Long> failures : counted) {
            synchronized (failures) {
                failures.addLast(now);
            }
        }
        if (FAILURES.size() > 100_000) {  // names and addresses seen once, long ago
            FAILURES.entrySet().removeIf(entry -> entry.getValue().isEmpty());
        }
        throw new AuthenticationException("sign-in refused for " + user);
    }

    /**
     * Note each connection's address for its sign-in: the started Thrift server's transport factory (which runs
     * the SASL exchange, and so the sign-in, in the connection's thread) is wrapped to keep it while it runs.
     */
    public static void watchAddresses(HiveThriftServer2 hive) throws ReflectiveOperationException {
        for (Service service : hive.getServices()) {
            if (!(service instanceof ThriftBinaryCLIService)) {
                continue;
            }
            Field serverField = ThriftBinaryCLIService.class.getDeclaredField("server");
            serverField.setAccessible(true);
            TServer server = (TServer) serverField.get(service);
            Field factoryField = TServer.class.getDeclaredField("inputTransportFactory_");
            factoryField.setAccessible(true);
            TTransportFactory inner = (TTransportFactory) factoryField.get(server);
            factoryField.set(server, new TTransportFactory() {
                @Override
                public TTransport getTransport(TTransport transport) throws TTransportException {
                    if (transport instanceof TSocket && ((TSocket) transport).getSocket().getInetAddress() != null) {
                        ADDRESS.set(((TSocket) transport).getSocket().getInetAddress().getHostAddress());
                    }
                    try {
                        return inner.getTransport(transport);
                    } finally {
                        ADDRESS.remove();
                    }
                }
            });
            return;
        }
        throw new IllegalStateException("the Thrift server has no binary transport to watch");
    }

    private static String digest(String text) {
        try {
            Mac mac = Mac.getInstance("HmacSHA256");
            mac.init(new SecretKeySpec(KEY, "HmacSHA256"));
            return Base64.getEncoder().encodeToString(mac.doFinal(text.getBytes(StandardCharsets.UTF_8)));
        } catch (GeneralSecurityException e) {
            throw new IllegalStateException(e);
        }
    }

    /**
     * The users of a users file's lines, each name with the rest of its line (serving/users.py: FORMAT): blank
     * lines and spaces or tabs around a line ignored, any other line an IllegalArgumentException that names its number, as parse_users does.
     */
    static Map<String, String> parse(List<String> lines) {
        Map<String, String> users = new LinkedHashMap<>();
        Map<String, Integer> numbers = new HashMap<>();
        for (int i = 0; i < lines.size(); i++) {
            String line = lines.get(i).replaceAll("^[ \t]+|[ \t]+$", "");
            if (line.isEmpty()) {
                continue;
            }
            Matcher found = LINE.matcher(line);
            if (!found.matches()) {
                throw new IllegalArgumentException("line " + (i + 1) + ": not NAME:pbkdf2_sha256$ITERATIONS$SALT$HASH");
            }
            String name = found.group(1);
            if (users.containsKey(name)) {
                throw new IllegalArgumentException("line " + (i + 1) + ": user " + name + " is already on line "
                    + numbers.get(name));
            }
            users.put(name, line.substring(name.length() + 1));
            numbers.put(name, i + 1);
        }
        return users;
    }

    /** Whether the password derives the hash of a user's line past its name (parse has checked its form). */
    private static boolean matches(String password, String hashed) {
        String[] parts = hashed.split("\\$");
        try {
            int iterations = Integer.parseInt(parts[1]);
            byte[] salt = Base64.getDecoder().decode(parts[2]);
            byte[] expected = Base64.getDecoder().decode(parts[3]);
            PBEKeySpec spec = new PBEKeySpec(password.toCharArray(), salt, iterations, expected.length * 8);
            byte[] got = SecretKeyFactory.getInstance("PBKDF2WithHmacSHA256").generateSecret(spec).getEncoded();
            return MessageDigest.isEqual(got, expected);
        } catch (IllegalArgumentException | GeneralSecurityException e) {
            return false;
        }
    }

    /** Sign in once as USER (the password on stdin's first line) with the users file FILE: prints the outcome. */
    public static void main(String[] args) throws IOException {
        if (args.length != 2) {
            System.err.println("usage: java lakehouse.PasswordFile FILE USER < password");
            System.exit(2);
        }
        String password = new java.io.BufferedReader(new java.io.InputStreamReader(System.in,
            StandardCharsets.UTF_8)).readLine();
        configure(args[0], false);
        ready();
        try {
            new PasswordFile().Authenticate(args[1], password);
            System.out.println("accepted");
        } catch (AuthenticationException e) {
            System.out.println(e.getMessage());
            System.exit(1);
        }
    }
}
