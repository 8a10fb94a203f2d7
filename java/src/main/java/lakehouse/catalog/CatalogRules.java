package lakehouse.catalog;

import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Properties;
import java.util.regex.Pattern;

/**
 * What each principal may do, decided by the server for every request. A principal either writes (creates, commits,
 * drops: everything) or only reads; a reader may be kept to the tables whose `namespace.name` matches its
 * `visible` pattern (ML users: the ML tables) and from those that match its `hidden` pattern (the raw layers, for
 * analysts): the others are left out of its listings and refused on load. A principal the rules do not name may do
 * nothing.
 *
 * <p>Each principal may be handed the storage settings it reads and writes the tables' files with (its own S3 keys,
 * read-only ones for readers), with every table it loads: it then holds no key of the warehouse's own.
 *
 * <p>Written as properties: `rules.PRINCIPAL.write=true|false`, `rules.PRINCIPAL.visible=REGEX` and
 * `rules.PRINCIPAL.hidden=REGEX` (both optional), `rules.PRINCIPAL.vend.KEY=VALUE` (FileIO settings, e.g.
 * `s3.access-key-id`).
 */
public final class CatalogRules {

  /** A request the rules do not allow: the server answers 403 with this message. */
  public static final class Forbidden extends RuntimeException {
    public Forbidden(String message) {
      super(message);
    }
  }

  private record Rule(boolean write, Pattern visible, Pattern hidden, Map<String, String> vend) {}

  private final Map<String, Rule> rules;

  private CatalogRules(Map<String, Rule> rules) {
    this.rules = rules;
  }

  public static CatalogRules from(Properties props) {
    Map<String, Rule> rules = new LinkedHashMap<>();
    for (String key : props.stringPropertyNames()) {
      if (key.startsWith("rules.") && key.endsWith(".write")) {
        String principal = key.substring("rules.".length(), key.length() - ".write".length());
        String vend = "rules." + principal + ".vend.";
        Map<String, String> vended = new LinkedHashMap<>();
        for (String name : props.stringPropertyNames()) {
          if (name.startsWith(vend)) {
            vended.put(name.substring(vend.length()), props.getProperty(name));
          }
        }
        rules.put(principal, new Rule(Boolean.parseBoolean(props.getProperty(key)),
            pattern(props, principal, "visible"), pattern(props, principal, "hidden"), Map.copyOf(vended)));
      }
    }
    return new CatalogRules(rules);
  }

  private static Pattern pattern(Properties props, String principal, String which) {
    String regex = props.getProperty("rules." + principal + "." + which, "");
    return regex.isEmpty() ? null : Pattern.compile(regex);
  }

  private Rule rule(String principal) {
    Rule rule = rules.get(principal);
    if (rule == null) {
      throw new Forbidden("principal '" + principal + "' is not one of the catalog's principals ("
          + String.join(", ", rules.keySet()) + ")");
    }
    return rule;
  }

  /** Whether `principal` may see the table `path` (`namespace.name`) at all. */
  public boolean mayRead(String principal, String path) {
    Rule rule = rule(principal);
    return (rule.visible() == null || rule.visible().matcher(path).find())
        && (rule.hidden() == null || !rule.hidden().matcher(path).find());
  }

  public void checkRead(String principal, String path) {
    if (!mayRead(principal, path)) {
      throw new Forbidden("principal '" + principal + "' may not read " + path);
    }
  }

  /** `what` (create, commit, drop, ...) of `target`: only a principal that writes may. */
  public void checkWrite(String principal, String what, String target) {
    if (!rule(principal).write()) {
      throw new Forbidden("principal '" + principal + "' may not " + what + " " + target
          + ": the catalog allows it reads only");
    }
  }

  /** The storage settings handed to `principal` with each table it loads (none when empty). */
  public Map<String, String> vended(String principal) {
    return rule(principal).vend();
  }

  /** Any request at all (the catalog's configuration, the namespaces): a principal the rules name. */
  public void checkKnown(String principal) {
    rule(principal);
  }
}
