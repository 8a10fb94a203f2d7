package lakehouse.catalog;

import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.io.Reader;
import java.net.InetSocketAddress;
import java.net.URLDecoder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Instant;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.Executors;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Collectors;

import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpServer;

import org.apache.iceberg.CatalogProperties;
import org.apache.iceberg.CatalogUtil;
import org.apache.iceberg.catalog.Catalog;
import org.apache.iceberg.catalog.Namespace;
import org.apache.iceberg.catalog.SupportsNamespaces;
import org.apache.iceberg.catalog.TableIdentifier;
import org.apache.iceberg.exceptions.AlreadyExistsException;
import org.apache.iceberg.exceptions.CommitFailedException;
import org.apache.iceberg.exceptions.NamespaceNotEmptyException;
import org.apache.iceberg.exceptions.NoSuchNamespaceException;
import org.apache.iceberg.exceptions.NoSuchTableException;
import org.apache.iceberg.exceptions.NotFoundException;
import org.apache.iceberg.exceptions.ValidationException;
import org.apache.iceberg.rest.CatalogHandlers;
import org.apache.iceberg.rest.Endpoint;
import org.apache.iceberg.rest.RESTCatalogProperties;
import org.apache.iceberg.rest.RESTSerializers;
import org.apache.iceberg.rest.RESTUtil;
import org.apache.iceberg.rest.requests.CommitTransactionRequest;
import org.apache.iceberg.rest.requests.CreateNamespaceRequest;
import org.apache.iceberg.rest.requests.CreateTableRequest;
import org.apache.iceberg.rest.requests.RegisterTableRequest;
import org.apache.iceberg.rest.requests.RenameTableRequest;
import org.apache.iceberg.rest.requests.UpdateNamespacePropertiesRequest;
import org.apache.iceberg.rest.requests.UpdateTableRequest;
import org.apache.iceberg.rest.responses.ConfigResponse;
import org.apache.iceberg.rest.responses.ErrorResponse;
import org.apache.iceberg.rest.responses.ErrorResponseParser;
import org.apache.iceberg.rest.responses.ListTablesResponse;
import org.apache.iceberg.rest.responses.LoadTableResponse;
import org.apache.iceberg.shaded.com.fasterxml.jackson.annotation.JsonAutoDetect;
import org.apache.iceberg.shaded.com.fasterxml.jackson.annotation.PropertyAccessor;
import org.apache.iceberg.shaded.com.fasterxml.jackson.databind.DeserializationFeature;
import org.apache.iceberg.shaded.com.fasterxml.jackson.databind.ObjectMapper;
import org.apache.iceberg.shaded.com.fasterxml.jackson.databind.PropertyNamingStrategies;

/**
 * The lakehouse's Iceberg REST catalog server: the REST protocol (v1) over the lakehouse's own SQL catalog (Iceberg's
 * JDBC catalog on SQLite or PostgreSQL, the tables the pipeline writes), with Iceberg's own request handlers
 * (CatalogHandlers: the same checks of requirements and the same metadata updates as every Iceberg catalog), so that
 * each table keeps all of Iceberg: its snapshots, branches and tags. Every request carries a bearer token
 * (BearerTokens) and is decided by the catalog's rules (CatalogRules): a write an analyst's engine sends is refused
 * here, whatever the engine let through. A commit of several tables is all or nothing (TransactionCommit).
 *
 * <p>Run: {@code java -cp <this jar>:<iceberg and JDBC jars> lakehouse.catalog.RestCatalogServer <config file>}. The
 * configuration (a properties file, readable by its owner only: it holds the database's and the store's secrets):
 * {@code host}, {@code port}, {@code name} (the catalog name of the rows), {@code token.public-key} (a PEM file),
 * {@code token.issuer}, {@code rules.*} (CatalogRules), and {@code catalog.*}: the JDBC catalog's own properties
 * ({@code uri}, {@code warehouse}, {@code jdbc.user}, {@code io-impl}, {@code s3.endpoint}, ...).
 */
public final class RestCatalogServer {

  private static final ObjectMapper MAPPER = mapper();
  private static final String SEPARATOR = "%1F";
  private static final Pattern NAMESPACE = Pattern.compile("^/v1/(?:[^/]+/)?namespaces/([^/]+)(/.*)?$");
  private static final Pattern TABLE = Pattern.compile("^/tables/([^/]+)(/metrics)?$");
  private static final List<Endpoint> ENDPOINTS = List.of(
      Endpoint.V1_LIST_NAMESPACES, Endpoint.V1_LOAD_NAMESPACE, Endpoint.V1_NAMESPACE_EXISTS,
      Endpoint.V1_CREATE_NAMESPACE, Endpoint.V1_UPDATE_NAMESPACE, Endpoint.V1_DELETE_NAMESPACE,
      Endpoint.V1_LIST_TABLES, Endpoint.V1_LOAD_TABLE, Endpoint.V1_TABLE_EXISTS, Endpoint.V1_CREATE_TABLE,
      Endpoint.V1_UPDATE_TABLE, Endpoint.V1_DELETE_TABLE, Endpoint.V1_RENAME_TABLE, Endpoint.V1_REGISTER_TABLE,
      Endpoint.V1_REPORT_METRICS, Endpoint.V1_COMMIT_TRANSACTION);

  /** An answer other than 200 with a body: its HTTP status and the REST protocol's error. */
  private static final class Status extends RuntimeException {
    final int code;

    Status(int code, String message) {
      super(message);
      this.code = code;
    }
  }

  private final Catalog catalog;
  private final SupportsNamespaces namespaces;
  private final BearerTokens tokens;
  private final CatalogRules rules;
  private final TransactionCommit transactions;

  RestCatalogServer(Catalog catalog, BearerTokens tokens, CatalogRules rules, TransactionCommit transactions) {
    this.catalog = catalog;
    this.namespaces = (SupportsNamespaces) catalog;
    this.tokens = tokens;
    this.rules = rules;
    this.transactions = transactions;
  }

  static ObjectMapper mapper() {
    ObjectMapper mapper = new ObjectMapper();
    mapper.setVisibility(PropertyAccessor.FIELD, JsonAutoDetect.Visibility.ANY);
    mapper.configure(DeserializationFeature.FAIL_ON_UNKNOWN_PROPERTIES, false);
    mapper.setPropertyNamingStrategy(new PropertyNamingStrategies.KebabCaseStrategy());
    RESTSerializers.registerAll(mapper);
    return mapper;
  }

  public static void main(String[] args) throws Exception {
    if (args.length != 1) {
      System.err.println("usage: RestCatalogServer <config.properties>");
      System.exit(2);
    }
    Properties config = new Properties();
    try (Reader in = Files.newBufferedReader(Path.of(args[0]))) {
      config.load(in);
    }
    String name = config.getProperty("name", "lakehouse");
    Map<String, String> props = new HashMap<>();
    for (String key : config.stringPropertyNames()) {
      if (key.startsWith("catalog.")) {
        props.put(key.substring("catalog.".length()), config.getProperty(key));
      }
    }
    props.put(CatalogProperties.CATALOG_IMPL, "org.apache.iceberg.jdbc.JdbcCatalog");
    Catalog catalog = CatalogUtil.buildIcebergCatalog(name, props, new org.apache.hadoop.conf.Configuration());
    BearerTokens tokens = new BearerTokens(
        BearerTokens.publicKey(Files.readString(Path.of(config.getProperty("token.public-key")))),
        config.getProperty("token.issuer"));
    RestCatalogServer server = new RestCatalogServer(catalog, tokens, CatalogRules.from(config),
        new TransactionCommit(catalog, name, props.get(CatalogProperties.URI), props));
    String host = config.getProperty("host", "127.0.0.1");
    int port = Integer.parseInt(config.getProperty("port"));
    HttpServer http = HttpServer.create(new InetSocketAddress(host, port), 128);
    http.createContext("/", server::handle);
    http.setExecutor(Executors.newFixedThreadPool(Integer.parseInt(config.getProperty("threads", "16"))));
    http.start();
    System.out.println("lakehouse REST catalog serving " + props.get(CatalogProperties.URI).replaceAll("//[^@/]*@", "//")
        + " on http://" + host + ":" + port);
  }

  void handle(HttpExchange exchange) throws IOException {
    long started = System.nanoTime();
    String principal = "-";
    int code;
    String body;
    try {
      principal = tokens.principal(exchange.getRequestHeaders().getFirst("Authorization"),
          System.currentTimeMillis() / 1000);
      rules.checkKnown(principal);
      Object response = route(principal, exchange.getRequestMethod(), exchange.getRequestURI().getRawPath(),
          query(exchange.getRequestURI().getRawQuery()), exchange.getRequestBody());
      code = response == null ? 204 : 200;
      body = response == null ? null : MAPPER.writeValueAsString(response);
    } catch (BearerTokens.Refused e) {
      code = 401;
      body = error(code, "NotAuthorizedException", e.getMessage());
    } catch (CatalogRules.Forbidden e) {
      code = 403;
      body = error(code, "ForbiddenException", e.getMessage());
    } catch (Status e) {
      code = e.code;
      body = error(code, e.code == 404 ? "NoSuchEndpointException" : "BadRequestException", e.getMessage());
    } catch (Exception e) {
      code = status(e);
      body = error(code, e.getClass().getSimpleName(), String.valueOf(e.getMessage()));
      if (code == 500) {
        e.printStackTrace();
      }
    }
    if (body == null || exchange.getRequestMethod().equals("HEAD")) {  // an answer to HEAD has no body
      exchange.sendResponseHeaders(code, -1);
    } else {
      byte[] bytes = body.getBytes(StandardCharsets.UTF_8);
      exchange.getResponseHeaders().set("Content-Type", "application/json");
      exchange.sendResponseHeaders(code, bytes.length);
      try (OutputStream out = exchange.getResponseBody()) {
        out.write(bytes);
      }
    }
    exchange.close();
    // The access log: who asked for what, and the answer (the server's log file; its principal "-" when the token
    // was refused).
    System.out.println(Instant.now() + " " + principal + " " + exchange.getRequestMethod() + " "
        + exchange.getRequestURI().getRawPath() + " " + code + " " + (System.nanoTime() - started) / 1_000_000 + "ms");
  }

  static int status(Exception e) {
    if (e instanceof NoSuchNamespaceException || e instanceof NoSuchTableException || e instanceof NotFoundException) {
      return 404;
    }
    if (e instanceof AlreadyExistsException || e instanceof CommitFailedException
        || e instanceof NamespaceNotEmptyException) {
      return 409;
    }
    if (e instanceof ValidationException || e instanceof IllegalArgumentException
        || e instanceof org.apache.iceberg.shaded.com.fasterxml.jackson.core.JsonProcessingException) {
      return 400;
    }
    if (e instanceof UnsupportedOperationException) {
      return 406;
    }
    return 500;  // CommitStateUnknownException among them: the client must not take the commit for failed
  }

  private static String error(int code, String type, String message) {
    return ErrorResponseParser.toJson(ErrorResponse.builder().responseCode(code).withType(type)
        .withMessage(message).build());
  }

  private static Map<String, String> query(String raw) {
    Map<String, String> query = new HashMap<>();
    if (raw != null) {
      for (String pair : raw.split("&")) {
        int eq = pair.indexOf('=');
        String key = URLDecoder.decode(eq < 0 ? pair : pair.substring(0, eq), StandardCharsets.UTF_8);
        query.put(key, eq < 0 ? "" : pair.substring(eq + 1));
      }
    }
    return query;
  }

  private static <T> T read(InputStream body, Class<T> type) throws IOException {
    return MAPPER.readValue(body, type);
  }

  private static String path(TableIdentifier id) {
    return id.toString();
  }

  private Object route(String principal, String method, String path, Map<String, String> query, InputStream body)
      throws IOException {
    if (path.equals("/v1/config")) {
      return ConfigResponse.builder().withEndpoints(ENDPOINTS).build();
    }
    String rest = path.replaceFirst("^/v1/[^/]+(?=/(?:namespaces|tables|transactions)(?:/|$))", "/v1");
    if (rest.equals("/v1/namespaces")) {
      return namespaces(principal, method, query, body);
    }
    if (rest.equals("/v1/tables/rename") && method.equals("POST")) {
      RenameTableRequest rename = read(body, RenameTableRequest.class);
      rules.checkWrite(principal, "rename", path(rename.source()));
      CatalogHandlers.renameTable(catalog, rename);
      return null;
    }
    if (rest.equals("/v1/transactions/commit") && method.equals("POST")) {
      CommitTransactionRequest commit = read(body, CommitTransactionRequest.class);
      String tables = commit.tableChanges().stream().map(c -> path(c.identifier())).collect(Collectors.joining(", "));
      rules.checkWrite(principal, "commit to", tables);
      transactions.commit(commit);
      return null;
    }
    Matcher ns = NAMESPACE.matcher(rest);
    if (!ns.matches()) {
      throw new Status(404, "no such endpoint: " + method + " " + path);
    }
    Namespace namespace = RESTUtil.decodeNamespace(ns.group(1), SEPARATOR);
    String tail = ns.group(2) == null ? "" : ns.group(2);
    if (tail.isEmpty() || tail.equals("/properties")) {
      return namespace(principal, method, namespace, tail, body);
    }
    if (tail.equals("/tables")) {
      return tables(principal, method, namespace, body);
    }
    if (tail.equals("/register") && method.equals("POST")) {
      RegisterTableRequest register = read(body, RegisterTableRequest.class);
      rules.checkWrite(principal, "register", namespace + "." + register.name());
      return vended(principal, CatalogHandlers.registerTable(catalog, namespace, register));
    }
    Matcher table = TABLE.matcher(tail);
    if (!table.matches()) {
      throw new Status(404, "no such endpoint: " + method + " " + path);
    }
    TableIdentifier id = TableIdentifier.of(namespace, RESTUtil.decodeString(table.group(1)));
    rules.checkRead(principal, path(id));
    if (table.group(2) != null) {
      body.readAllBytes();  // the client's scan and commit reports: taken, not kept
      return null;
    }
    return table(principal, method, id, query, body);
  }

  /** A table's answer with the storage settings the rules hand `principal` (its own keys, not the warehouse's). */
  private LoadTableResponse vended(String principal, LoadTableResponse loaded) {
    Map<String, String> vend = rules.vended(principal);
    if (vend.isEmpty()) {
      return loaded;
    }
    return LoadTableResponse.builder().withTableMetadata(loaded.tableMetadata()).addAllConfig(loaded.config())
        .addAllConfig(vend).build();
  }

  private Object namespaces(String principal, String method, Map<String, String> query, InputStream body)
      throws IOException {
    if (method.equals("GET")) {
      String parent = query.get("parent");
      Namespace of = parent == null || parent.isEmpty() ? Namespace.empty()
          : RESTUtil.decodeNamespace(parent, SEPARATOR);
      return CatalogHandlers.listNamespaces(namespaces, of);
    }
    if (method.equals("POST")) {
      CreateNamespaceRequest create = read(body, CreateNamespaceRequest.class);
      rules.checkWrite(principal, "create the namespace", create.namespace().toString());
      return CatalogHandlers.createNamespace(namespaces, create);
    }
    throw new Status(405, method + " is not allowed on namespaces");
  }

  private Object namespace(String principal, String method, Namespace namespace, String tail, InputStream body)
      throws IOException {
    if (tail.equals("/properties") && method.equals("POST")) {
      UpdateNamespacePropertiesRequest update = read(body, UpdateNamespacePropertiesRequest.class);
      rules.checkWrite(principal, "change the properties of", namespace.toString());
      return CatalogHandlers.updateNamespaceProperties(namespaces, namespace, update);
    }
    switch (method) {
      case "GET":
        return CatalogHandlers.loadNamespace(namespaces, namespace);
      case "HEAD":
        CatalogHandlers.namespaceExists(namespaces, namespace);
        return null;
      case "DELETE":
        rules.checkWrite(principal, "drop the namespace", namespace.toString());
        CatalogHandlers.dropNamespace(namespaces, namespace);
        return null;
      default:
        throw new Status(405, method + " is not allowed on a namespace");
    }
  }

  private Object tables(String principal, String method, Namespace namespace, InputStream body) throws IOException {
    if (method.equals("GET")) {
      List<TableIdentifier> visible = CatalogHandlers.listTables(catalog, namespace).identifiers().stream()
          .filter(id -> rules.mayRead(principal, path(id))).collect(Collectors.toList());
      return ListTablesResponse.builder().addAll(visible).build();
    }
    if (method.equals("POST")) {
      CreateTableRequest create = read(body, CreateTableRequest.class);
      rules.checkWrite(principal, "create", namespace + "." + create.name());
      return vended(principal, create.stageCreate() ? CatalogHandlers.stageTableCreate(catalog, namespace, create)
          : CatalogHandlers.createTable(catalog, namespace, create));
    }
    throw new Status(405, method + " is not allowed on tables");
  }

  private Object table(String principal, String method, TableIdentifier id, Map<String, String> query,
                       InputStream body) throws IOException {
    switch (method) {
      case "GET":
        return vended(principal, CatalogHandlers.loadTable(catalog, id, "refs".equals(query.get("snapshots"))
            ? RESTCatalogProperties.SnapshotMode.REFS : RESTCatalogProperties.SnapshotMode.ALL));
      case "HEAD":
        CatalogHandlers.tableExists(catalog, id);
        return null;
      case "POST":
        UpdateTableRequest update = read(body, UpdateTableRequest.class);
        rules.checkWrite(principal, "commit to", path(id));
        return vended(principal, TransactionCommit.commitTable(catalog, id, update));
      case "DELETE":
        rules.checkWrite(principal, "drop", path(id));
        if ("true".equals(query.get("purgeRequested"))) {
          CatalogHandlers.purgeTable(catalog, id);
        } else {
          CatalogHandlers.dropTable(catalog, id);
        }
        return null;
      default:
        throw new Status(405, method + " is not allowed on a table");
    }
  }
}
