import org.apache.hadoop.yarn.conf.YarnConfiguration;

/**
 * What Hadoop's YARN client reads for each key named: a YarnConfiguration, from the
 * configuration dir first on the classpath, as skein's driver makes its YarnClient's.
 * Run as a single source file: java -cp CONF_DIR:HADOOP_CLASSPATH YarnConfRead.java KEY...
 */
public class YarnConfRead {
  public static void main(String[] args) {
    YarnConfiguration conf = new YarnConfiguration();
    for (String key : args) {
      System.out.println(key + "=" + conf.get(key));
    }
  }
}
