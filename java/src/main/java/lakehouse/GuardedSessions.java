package lakehouse;

import java.lang.reflect.Field;
import java.util.Locale;
import java.util.Map;
import java.util.regex.Pattern;

import org.apache.hadoop.hive.conf.HiveConf;
import org.apache.hive.service.cli.CLIService;
import org.apache.hive.service.cli.HiveSQLException;
import org.apache.hive.service.cli.SessionHandle;
import org.apache.hive.service.cli.operation.OperationManager;
import org.apache.hive.service.cli.session.HiveSession;
import org.apache.hive.service.cli.session.SessionManager;
import org.apache.hive.service.rpc.thrift.TProtocolVersion;
import org.apache.spark.sql.hive.thriftserver.HiveThriftServer2;

/**
 * The SQL endpoint's sessions: what a client sends when it opens one passes the read-only list before Hive or
 * Spark applies any of it. HiveServer2 applies a session's opening configuration on its own: `set:hiveconf:K`
 * and `set:hivevar:K` become Spark settings of the session without the SET check, `set:system:K` changes the
 * server's JVM system properties (sign-in among them), anything else changes the session's Hive configuration.
 * Here a setting is taken only when SET would take it (ReadPolicy: a listed key, within its bounds), `use:database`
 * only when it names a namespace, and everything else refuses the session, with the reason.
 */
public final class GuardedSessions extends SessionManager {
    static final Pattern NAME = Pattern.compile("[A-Za-z_][A-Za-z0-9_]{0,127}");

    private final SessionManager sessions;  // Spark's, which opens the sessions this one lets through

    private GuardedSessions(HiveThriftServer2 server, SessionManager sessions) {
        super(server);
        this.sessions = sessions;
    }

    /**
     * Put guarded sessions in front of the started Thrift server's (before any client has connected): the CLI
     * service asks this one, which checks a session's opening and hands everything else to Spark's.
     */
    public static void install(HiveThriftServer2 server) throws ReflectiveOperationException {
        CLIService cli = CatalogMetadata.cliService(server);
        Field field = CLIService.class.getDeclaredField("sessionManager");
        field.setAccessible(true);
        field.set(cli, new GuardedSessions(server, cli.getSessionManager()));
    }

    @Override
    public SessionHandle openSession(TProtocolVersion protocol, String user, String password, String address,
                                     Map<String, String> configuration, boolean impersonation, String token)
            throws HiveSQLException {
        String why = refused(configuration);
        if (why != null) {
            throw new HiveSQLException("refused: " + why + "; this endpoint only reads");
        }
        return sessions.openSession(protocol, user, password, address, configuration, impersonation, token);
    }

    @Override
    public void closeSession(SessionHandle handle) throws HiveSQLException {
        sessions.closeSession(handle);
    }

    @Override
    public HiveSession getSession(SessionHandle handle) throws HiveSQLException {
        return sessions.getSession(handle);
    }

    @Override
    public OperationManager getOperationManager() {
        return sessions.getOperationManager();
    }

    @Override
    public HiveConf getHiveConf() {
        return sessions.getHiveConf();
    }

    @Override
    public int getOpenSessionCount() {
        return sessions.getOpenSessionCount();
    }

    /** Why a session's opening configuration is refused, or null when every entry of it may be applied. */
    static String refused(Map<String, String> configuration) {
        if (configuration == null) {
            return null;
        }
        ReadPolicy policy = ReadPolicy.get();
        for (Map.Entry<String, String> entry : configuration.entrySet()) {
            String key = entry.getKey() == null ? "" : entry.getKey();
            String lower = key.toLowerCase(Locale.ROOT);
            if (lower.equals("use:database")) {
                if (entry.getValue() == null || !NAME.matcher(entry.getValue()).matches()) {
                    return "a session's database is a namespace's name, not "
                        + ReadPolicy.abbreviate(String.valueOf(entry.getValue()));
                }
                continue;
            }
            String setting = lower.startsWith("set:hiveconf:") ? key.substring(13)
                : lower.startsWith("set:hivevar:") ? key.substring(12) : null;
            if (setting == null) {
                return "a session may not open with " + ReadPolicy.abbreviate(key)
                    + " (only use:database and set:hiveconf: of a setting a client may change)";
            }
            String why = policy.settingRefused(setting, entry.getValue());
            if (why != null) {
                return why;
            }
        }
        return null;
    }
}
